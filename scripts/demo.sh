#!/usr/bin/env bash
# The newcomer's first run: builds hookvisor, copies the sample workspace into a fresh git
# repository and walks through one agent turn that fails a hook, the fix, and a commit.
# With --serve it ends by starting `hookvisor serve` on the workspace: the dashboard is at
# http://127.0.0.1:7433/ until Ctrl-C.
set -euo pipefail
serve=false
[ "${1:-}" = "--serve" ] && serve=true
here=$(cd "$(dirname "$0")/.." && pwd)
need() { command -v "$1" >/dev/null || { echo "demo: '$1' is missing; install it (Debian: apt-get install $2)"; exit 2; }; }
need git git
need cargo "rustup (https://rustup.rs)"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "build (release)"
cargo build --release --quiet --manifest-path "$here/Cargo.toml"
hv="$here/target/release/hookvisor"

work=$(mktemp -d "${TMPDIR:-/tmp}/hookvisor-demo.XXXXXX")
export HOOKVISOR_STATE_DIR="$work/state"
# The demo evaluates in-process, even if a server is announced in this shell.
unset HOOKVISOR_URL HOOKVISOR_SOCKET
ws="$work/workspace"
cp -r "$here/examples/sample-workspace" "$ws"
cd "$ws"
git init -q
git -c user.name=demo -c user.email=demo@example.com add -A
git -c user.name=demo -c user.email=demo@example.com commit -qm "sample workspace"

step "hookvisor list"
"$hv" list
step "hookvisor check"
"$hv" check && echo "no problems"

step "session hooks (what hookvisor-init runs at container start)"
"$hv" session

step "the agent edits README.md and leaves trailing whitespace; end of turn: hookvisor eval"
printf 'A line with trailing spaces   \n' >> README.md
set +e
"$hv" eval --trigger user
echo "(exit status $?: the message above is what the model is re-prompted with)"
set -e

step "the model fixes it; end of the hook-triggered turn"
sed -i 's/[[:space:]]*$//' README.md
"$hv" eval --trigger hook && echo "(exit status 0: pass, the agent may stop)"

step "pre-commit: a FIXME in src/ blocks the commit"
"$hv" pre-commit install
echo "FIXME: later" >> src/app.txt
git add -A
if git -c user.name=demo -c user.email=demo@example.com commit -qm "with fixme"; then
  echo "unexpected: the commit went through"; exit 1
fi
sed -i "s/FIXME: later/later: done/" src/app.txt
git add -A
git -c user.name=demo -c user.email=demo@example.com commit -qm "clean" && echo "commit passed"

step "hookvisor status"
"$hv" status
echo
echo "state dir: $HOOKVISOR_STATE_DIR (status.json, output/*.log); workspace: $ws"
if $serve; then
  step "hookvisor serve: dashboard at http://127.0.0.1:7433/ (Ctrl-C to stop)"
  exec "$hv" serve
fi
echo "see it live: $hv --workspace $ws --state-dir $HOOKVISOR_STATE_DIR serve, then open http://127.0.0.1:7433/"
