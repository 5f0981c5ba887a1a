#!/usr/bin/env bash
# The whole test suite, as CI runs it: system packages the tests need, format, lints, docs,
# then every test. Tests that need root (PID namespaces, setuid to a test user) run when this
# runs as root; with CI=true they fail instead of skipping when they cannot.
set -euo pipefail
cd "$(dirname "$0")/.."

# libnss-systemd: its NSS module is what a static glibc crashes on (tests/account.rs of the init);
# binutils: nm, to check that no passwd or group lookup is linked into the shipped init.
packages=(git util-linux passwd procps curl debootstrap chromium chromium-driver libc6-dev
  libnss-systemd binutils)
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

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
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
