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

echo "[test] cargo test (workspace): the build"
cargo test --workspace --locked --no-run

# Two builds the tests do not need run beside them at idle priority
# (SCHED_IDLE, nice 19): the data plane without etcd, and the release
# build of the callgrind guard. The integration tests mostly wait on their
# peers, so those builds take the idle CPU instead of 5 minutes of their
# own after the tests. The same session is kept on purpose: with the
# kernel's autogroup scheduling a new session (setsid) would be a group of
# equal weight and the priority would not hold. Each in its own target
# directory: `cargo test` holds target/ while it runs.
side_log=$(mktemp)
pkgdir=$(mktemp -d)
side_pid=
# A failed test ends the script: the side builds (cargo and its rustc
# children share the script's process group) are stopped with it.
kill_tree() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}
cleanup() {
    if [[ -n "$side_pid" ]]; then kill_tree "$side_pid"; fi
    rm -rf "$pkgdir" "$side_log"
}
trap cleanup EXIT
side_builds() {
    set -euo pipefail
    echo "[test] the data plane without etcd (--no-default-features)"
    # sip-gate and media-ctl for the embedded store only: no etcd-client,
    # tonic, prost or protoc. Checked, not built: the workspace builds link etcd.
    CARGO_TARGET_DIR=target/no-etcd cargo check -p sip-gate -p media-ctl --no-default-features --locked
    # The config's refusal of an etcd store in such a build (compiled only
    # without ringsync's `etcd` feature).
    CARGO_TARGET_DIR=target/no-etcd cargo test -p ringsync --lib --no-default-features --locked -- --test-threads=2
    echo "[test] the callgrind guard's release build"
    CARGO_TARGET_DIR=target/callgrind cargo build --release --locked --quiet -p sip-gate --example calls
}
chrt --idle 0 nice -n 19 bash -c "$(declare -f side_builds); side_builds" >"$side_log" 2>&1 &
side_pid=$!

echo "[test] cargo test (workspace)"
# Integration tests start real peers on 127.0.0.x; two tests at a
# time keep a 2-core machine from starving SIPp's timers.
PROPTEST_CASES="${PROPTEST_CASES:-2000}" cargo test --workspace --locked -- --test-threads=2

echo "[test] the builds beside the tests (waiting for them if they are not done)"
side_status=0
wait "$side_pid" || side_status=$?
side_pid=
cat "$side_log"
(( side_status == 0 )) || { echo "[test] error: a build beside the tests failed ($side_status)" >&2; exit 1; }

echo "[test] the Debian packages of the debug build: lintian, the man pages, purge"
# The release packages take minutes to build (scripts/package.sh); the same
# script on the debug binaries the tests built checks everything but the
# optimiser: lintian (any error or warning fails), sip-gate.toml(5), and
# the purge that removes the tokens file and /var/lib/sip-gate.
PACKAGE_PROFILE=debug scripts/package.sh "$pkgdir"
ringsync_deb=$(ls "$pkgdir"/ringsync_*.deb)
# Listings read whole first: `grep -q` on a pipe would end dpkg-deb early.
grep -q ' ./usr/share/man/man5/sip-gate.toml.5.gz$' <<<"$(dpkg-deb -c "$ringsync_deb")" \
    || { echo "[test] error: no sip-gate.toml(5) in $ringsync_deb" >&2; exit 1; }
grep -q '^    rm -rf /var/lib/sip-gate$' <<<"$(dpkg-deb -I "$ringsync_deb" postrm)" \
    || { echo "[test] error: ringsync's postrm does not remove /var/lib/sip-gate on purge" >&2; exit 1; }
for deb in "$pkgdir"/*.deb; do
    bin=$(dpkg-deb -f "$deb" Package)
    grep -q " ./usr/share/man/man1/$bin.1.gz$" <<<"$(dpkg-deb -c "$deb")" \
        || { echo "[test] error: no $bin(1) in $deb" >&2; exit 1; }
done
echo "[test] packages: lintian clean, man pages and purge in place"

echo "[test] the routing core's instructions per call (callgrind guard)"
# Exact whatever the load: fails when a change costs more than 3% over the
# figure in bench/callgrind-per-call.txt, or saves more without lowering it.
# The release build is done beside the tests (above); this runs valgrind.
CALLGRIND_TARGET_DIR=target/callgrind scripts/callgrind-guard.sh
