#!/usr/bin/env bash
# Builds the release binaries as they ship, into target/release (or $CARGO_TARGET_DIR/release):
# `hookvisor`, and `hookvisor-init` linked statically against glibc (static-pie).
#
# The init starts every container, so it is built like tini-static: no dynamic loader, no
# libc.so to map, which makes its start-up as quick as tini's and its resident memory under
# 2 MB (BENCHMARKS.md, case 4). Cargo has no per-package target feature on stable (a global
# crt-static breaks proc-macros), so `cargo rustc` passes it to the init's final link only.
# Needs glibc's static library (Debian: libc6-dev, part of build-essential). Extra arguments go
# to both cargo commands (e.g. --locked).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p hookvisor "$@"
cargo rustc --release --quiet -p hookvisor-init --bin hookvisor-init "$@" -- -C target-feature=+crt-static
