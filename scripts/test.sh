#!/usr/bin/env bash
# The whole test suite, as CI runs it: system packages the tests need, format, lints, docs,
# then every test. Tests that need root (PID namespaces, setuid to a test user) run when this
# runs as root; with CI=true they fail instead of skipping when they cannot.
set -euo pipefail
cd "$(dirname "$0")/.."

# libnss-systemd: its NSS module is what a static glibc crashes on (tests/account.rs of the init);
# binutils: nm, to check that no passwd or group lookup is linked into the shipped init;
# locales: the de_DE source a test compiles to make git speak German (LC_ALL=C must win);
# python3: scripts/module-cycles.py;
# acl: setfacl, for the ACL that root's git check must read (tests/cli/eval.rs).
packages=(git util-linux passwd procps curl debootstrap chromium chromium-driver libc6-dev
  libnss-systemd binutils locales python3 acl)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "test.sh: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "test.sh: missing packages: ${missing[*]}; run: sudo apt-get install ${missing[*]}" >&2
    exit 2
  fi
fi

# The real agent clients of tests/agents (crates/hookvisor/tests/agents), at the versions pinned
# in its clients.json, installed with npm into a cache outside the checkout; reinstalled when the
# pins change. Without npm the suite skips them, unless CI=true (then it fails).
clients_json=crates/hookvisor/tests/agents/clients.json
clients_dir="${HOOKVISOR_AGENT_CLIENTS:-${HOOKVISOR_CACHE:-/var/cache/hookvisor-test}/npm}"
export HOOKVISOR_AGENT_CLIENTS="$clients_dir"
if command -v npm >/dev/null 2>&1; then
  if ! cmp -s "$clients_json" "$clients_dir/package.json" || [ ! -d "$clients_dir/node_modules" ]; then
    echo "== npm install the pinned agent clients into $clients_dir"
    mkdir -p "$clients_dir"
    cp "$clients_json" "$clients_dir/package.json"
    rm -f "$clients_dir/package-lock.json"
    (cd "$clients_dir" && npm install --no-audit --no-fund --loglevel=error)
  fi
elif [ "${CI:-}" = true ]; then
  echo "test.sh: npm is missing, and CI=true: the agent clients cannot be installed" >&2
  exit 1
else
  echo "test.sh: npm is missing: the real-client suite (tests/agents) will skip"
fi

# mdBook, which builds the book under docs/, at a pinned version, built once into the same cache
# (about a minute on 2 cores; no server or watcher features).
mdbook_version=0.5.4
mdbook_dir="${HOOKVISOR_CACHE:-/var/cache/hookvisor-test}/mdbook-$mdbook_version"
if [ ! -x "$mdbook_dir/bin/mdbook" ]; then
  echo "== cargo install mdbook $mdbook_version into $mdbook_dir"
  cargo install mdbook --locked --quiet --no-default-features --version "$mdbook_version" \
    --root "$mdbook_dir"
fi

echo "== module cycles (each crate's top-level modules form a map, no cycle)"
python3 scripts/module-cycles.py
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo doc -D warnings (private items too)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --document-private-items --quiet
echo "== mdbook build docs (the book; cargo test runs its examples: tests/cli/docs.rs)"
"$mdbook_dir/bin/mdbook" build docs 2>&1 | { grep -v "^ INFO" || true; }
echo "== cargo test"
cargo test --workspace --no-fail-fast
echo "== container smoke test (hookvisor-init as PID 1 in a Debian root)"
if [ "$(id -u)" = 0 ]; then
  scripts/container-smoke.sh
elif [ "${CI:-}" = true ]; then
  echo "test.sh: the container smoke test needs root, and CI=true" >&2
  exit 1
else
  echo "test.sh: not root: skipping scripts/container-smoke.sh (run it as root)"
fi
