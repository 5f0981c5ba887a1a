#!/usr/bin/env bash
# Builds the release binaries as they ship, into target/release (or $CARGO_TARGET_DIR/release):
# `hookvisor` and `hookvisor-init`, both linked statically against glibc (the init a static-pie).
#
# The init starts every container, so it is built like tini-static: no dynamic loader, no
# libc.so to map, which makes its start-up as quick as tini's and its resident memory under
# 2 MB (BENCHMARKS.md, case 4). `hookvisor fire` runs on every tool call of an agent, and the
# dynamic loading of glibc and libgcc_s was half of a fire that finds no hook (case 7).
# `hookvisor` is also not position-independent: a static-pie relocates 145 kB of pointers at
# every start, 40 copy-on-write page faults and a third of that fire's instructions. Its image
# is then at a fixed address (heap, stack and mappings stay randomized). The privilege
# boundary is the init, which stays a static-pie: `hookvisor` runs as the agent's user in the
# container, where the agent already runs code of its choosing.
#
# Neither binary looks anything up through NSS modules, which a static glibc cannot load
# safely: accounts are read from /etc/passwd and /etc/group (hookvisor-core's account.rs).
# The one exception is a host name in HOOKVISOR_URL or `serve --listen`, which getaddrinfo
# resolves with the built-in `files` and `dns` sources like a dynamic binary; another source
# in nsswitch.conf's `hosts:` (mdns, resolve) is loaded from the image's glibc, which must be
# the version it was built with (the Dockerfile builds and runs on the same Debian).
#
# Cargo has no per-package target feature on stable (a global crt-static breaks proc-macros),
# so `cargo rustc` passes it to each final link only. Needs glibc's static library (Debian:
# libc6-dev, part of build-essential). Extra arguments go to both cargo commands (e.g. --locked).
# A first argument `init` builds the init alone (the init's tests/account.rs needs no more).
set -euo pipefail
cd "$(dirname "$0")/.."
# Run from a test (the init's tests/account.rs), this inherits the variables cargo sets for that
# test; ring's build script is rerun when CARGO_PKG_NAME changes, so the release build it made
# would be stale for the next caller (container-smoke.sh) and everything above ring built twice.
while read -r var; do
  unset "$var"
done < <(compgen -e | grep -E '^CARGO_(PKG_|MANIFEST_|CRATE_|BIN_|PRIMARY_PACKAGE|TARGET_TMPDIR)' || true)
init_only=false
if [ "${1:-}" = init ]; then
  init_only=true
  shift
fi
if [ "$init_only" = false ]; then
  cargo rustc --release --quiet -p hookvisor --bin hookvisor "$@" -- \
    -C target-feature=+crt-static -C relocation-model=static
fi
cargo rustc --release --quiet -p hookvisor-init --bin hookvisor-init "$@" -- -C target-feature=+crt-static
