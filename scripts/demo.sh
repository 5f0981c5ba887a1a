#!/usr/bin/env bash
# The newcomer's first run: one agent turn under hookvisor, set up the way a container runs it.
#
#   scripts/demo.sh [--no-serve] [--port N] [--bin-dir DIR]
#
# It builds hookvisor, copies examples/sample-workspace into a fresh git repository and starts
# hookvisor-init there as PID 1 of a new PID namespace: `unshare --pid` as root; anyone else
# gets a user namespace of their own (`unshare --map-current-user`), which needs unprivileged
# user namespaces (Debian's default; where they are off, as on Ubuntu 24.04, use sudo).
# The init runs the session hooks, then its CMD: `hookvisor serve` supervising a scripted
# agent (this script with --agent) that plays one Claude Code turn: an edit that fails a file
# hook, the re-prompt, the fix, a commit the pre-commit hook blocks, the clean commit. The
# dashboard then shows those runs until Ctrl-C (http://127.0.0.1:7433/; --port N changes it).
# --no-serve ends after the turn instead, exiting 0 only if every step went as expected.
# --bin-dir DIR uses hookvisor and hookvisor-init from DIR instead of building them.
set -euo pipefail

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
fail() { printf '\ndemo: FAILED: %s\n' "$*" >&2; exit 1; }

# The scripted agent, CMD of the init (under `hookvisor serve`). It sends the JSON Claude Code
# sends on its events to the command `hookvisor install claude` writes for them.
agent() {
  # Whatever fails unexpectedly says so: the demo never passes silently.
  set -E
  trap 'fail "line $LINENO of $0 exited with status $?"' ERR
  claude() {
    printf '{"session_id":"%s","cwd":"%s","hook_event_name":"%s",%s}' \
      "$DISCOBOT_SESSION_ID" "$PWD" "$1" "$2" | hookvisor adapter claude
  }
  commit() { git commit -qm "$1" 2>&1 | sed 's/^/  | /'; return "${PIPESTATUS[0]}"; }

  step "inside the PID namespace: the init is PID 1, the server and this agent its children"
  ps -o pid,ppid,user,args -p "1,$PPID,$$"

  step "the user's prompt (UserPromptSubmit); the agent appends a line with trailing spaces"
  claude UserPromptSubmit '"prompt":"Add a line to README.md"'
  printf 'A line with trailing spaces   \n' >>README.md

  step "end of turn: Claude Code sends Stop; the file hook fails, so the adapter blocks"
  answer=$(claude Stop '"stop_hook_active":false')
  case $answer in *'"decision":"block"'*) ;; *) fail "expected a block, got '$answer'" ;; esac
  echo "Claude Code reads {\"decision\":\"block\",\"reason\":...} and gives the model this prompt:"
  printf '%s\n' "$answer" | sed 's/^.*"reason":"//; s/"}$//; s/\\n/\n/g; s/\\"/"/g' |
    sed 's/^/  | /'

  step "the model removes the spaces; its next Stop passes (no output: the agent may stop)"
  sed -i 's/[[:space:]]*$//' README.md
  answer=$(claude Stop '"stop_hook_active":true')
  [ -z "$answer" ] || fail "expected a pass, got '$answer'"
  echo "passed"

  step "git commit with a FIXME in src/: the pre-commit hook blocks it"
  echo "(hookvisor installed .git/hooks/pre-commit at start: the workspace has a pre-commit hook)"
  echo "FIXME: later" >>src/app.txt
  git add -A
  if commit "with a FIXME"; then fail "the commit went through"; fi
  echo "blocked, as expected"
  sed -i 's/FIXME: later/later: done/' src/app.txt
  git add -A
  commit "clean" || fail "the clean commit was blocked"
  echo "the clean commit passed: $(git log --oneline -1)"

  step "hookvisor status"
  hookvisor status
  echo
  echo "workspace: $PWD; state: $HOOKVISOR_STATE_DIR (remove them when done)"
  echo "demo: all steps went as expected"

  if [ "$1" = serve ]; then
    step "dashboard: ${HOOKVISOR_URL}/ (this demo's runs; Ctrl-C stops everything)"
    # As itself, the sleep gets the signals the server forwards to the agent.
    exec sleep infinity
  fi
}

if [ "${1:-}" = --agent ]; then
  agent "$2"
  exit
fi

serve=true port=7433 bin=
while [ $# -gt 0 ]; do
  case $1 in
    --no-serve) serve=false ;;
    --port) port=$2; shift ;;
    --bin-dir) bin=$2; shift ;;
    -h|--help) sed -n '2,15s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "usage: $0 [--no-serve] [--port N] [--bin-dir DIR]" >&2; exit 2 ;;
  esac
  shift
done
here=$(cd "$(dirname "$0")/.." && pwd)
need() {
  command -v "$1" >/dev/null ||
    { echo "demo: '$1' is missing; install it (Debian: apt-get install $2)"; exit 2; }
}
need git git
need unshare util-linux
need ps procps

if [ -z "$bin" ]; then
  need cargo "rustup (https://rustup.rs)"
  # Debug, not release: from scratch here it builds in ~1 min against ~2 min for the release
  # profile (fat LTO, one codegen unit), `cargo test` reuses it, and the demo's hooks are tiny.
  step "build (about a minute the first time)"
  cargo build --quiet --manifest-path "$here/Cargo.toml" -p hookvisor -p hookvisor-init
  bin=$here/target/debug
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/hookvisor-demo.XXXXXX")
ws=$work/workspace
# Copies in a directory only we can change: as root, the init runs hookvisor only from there.
mkdir "$work/bin" "$work/home"
cp "$bin/hookvisor" "$bin/hookvisor-init" "$work/bin/"
# A HOME of its own keeps your global hooks and git settings (signing, templates) out of it.
export HOME="$work/home" PATH="$work/bin:$PATH" HOOKVISOR_STATE_DIR="$work/state"
# The demo's server is the only one its agent talks to.
unset XDG_CONFIG_HOME HOOKVISOR_URL HOOKVISOR_SOCKET DISCOBOT_SESSION_ID SESSION_ID
cp -r "$here/examples/sample-workspace" "$ws"
cd "$ws"
git init -q
git config user.name demo
git config user.email demo@example.com
git add -A
git commit -qm "sample workspace"

step "the sample workspace's hooks (hookvisor list)"
hookvisor list

# A port of 0 is any free one: --no-serve never shows it.
if $serve; then mode=serve; else mode=once port=0; fi
if [ "$(id -u)" = 0 ]; then ns=(unshare --pid --fork --mount-proc --kill-child)
else ns=(unshare --map-current-user --pid --fork --mount-proc --kill-child); fi
"${ns[@]}" true ||
  fail "'${ns[*]}' failed: run the demo as root, or allow unprivileged user namespaces"

step "hookvisor-init as PID 1 ($(id -un)): session hooks, then hookvisor serve -- the agent"
# exec: nothing waits here to be killed alone; unshare's --kill-child takes the namespace down
# with it, and the status is the agent's (130 after a Ctrl-C).
exec "${ns[@]}" hookvisor-init --session demo -- \
  hookvisor serve --listen "127.0.0.1:$port" -- "$here/scripts/demo.sh" --agent "$mode"
