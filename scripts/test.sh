#!/usr/bin/env bash
# Runs every test of the workspace on a fresh Debian machine with the Rust
# toolchain: installs the real peers first (scripts/setup.sh, idempotent),
# then formatting and lint checks, then all tests (unit, torture, property,
# and the integration tests that drive real SIPp, Kamailio and the gate).
#
# PROPTEST_CASES raises the property-test budget (the fuzz run in CI).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

echo "[test] cargo fmt --check"
cargo fmt --all -- --check

echo "[test] cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "[test] cargo test (workspace)"
# Integration tests start real peers on 127.0.0.x; two test binaries at a
# time keep a 2-core machine from starving SIPp's timers.
PROPTEST_CASES="${PROPTEST_CASES:-2000}" cargo test --workspace --locked -- --test-threads=2
