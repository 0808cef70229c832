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

echo "[test] the data plane without etcd (--no-default-features)"
# sip-gate and media-ctl for the embedded store only: no etcd-client, tonic,
# prost or protoc. Checked, not built: the workspace builds link etcd.
cargo check -p sip-gate -p media-ctl --no-default-features --locked
# The config's refusal of an etcd store in such a build (compiled only
# without ringsync's `etcd` feature).
cargo test -p ringsync --lib --no-default-features --locked -- --test-threads=2

echo "[test] cargo test (workspace)"
# Integration tests start real peers on 127.0.0.x; two tests at a
# time keep a 2-core machine from starving SIPp's timers.
PROPTEST_CASES="${PROPTEST_CASES:-2000}" cargo test --workspace --locked -- --test-threads=2

echo "[test] the routing core's instructions per call (callgrind guard)"
# Exact whatever the load: fails when a change costs more than 3% over the
# figure in bench/callgrind-per-call.txt, or saves more without lowering it.
scripts/callgrind-guard.sh
