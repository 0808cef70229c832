#!/usr/bin/env bash
# Installs the real peers the testbed drives (SIPp, Kamailio, rtpengine,
# etcd, dnsmasq) on a fresh Debian machine that already has the Rust toolchain.
#
# Idempotent: apt is only touched when a package is missing, and the system
# services those packages ship are stopped and disabled every run, because
# the testbed starts its own instances on 127.0.0.x and a distro daemon
# holding 5060, 2379 or 22222 would make tests fail in confusing ways.
#
# Usage: scripts/setup.sh          (as root, or as a user with sudo)
set -euo pipefail

# libprotobuf-dev: the well-known .proto files protoc needs to build etcd-client
# (the `etcd` feature; a data-plane build with --no-default-features needs neither).
# dnsmasq-base: a DNS server for sip-gate's RFC 3263 tests (no service).
# fonts-dejavu-core: the font testbed run draws its chart's text with.
# chromium, chromium-driver: the browser WebRTC subscriber of the WebSocket tests.
# haproxy, exabgp, bird2: the edges ringsync's engine drivers and sip-gate's
# anycast announcer drive. prometheus: promtool and a real scrape of the alerts.
# python3-websockets: a small real WebSocket server for the ws pool tests.
# rtpengine-utils: rtpengine's own ng client, which media-ctl's JSON tests drive.
# valgrind: callgrind counts the routing core's instructions per call (the CI guard).
# sngrep, tshark: real HEP v3 collectors for the capture tests.
# lintian: checks the Debian packages scripts/package.sh builds.
PACKAGES=(sip-tester kamailio rtpengine-daemon rtpengine-utils etcd-server protobuf-compiler libprotobuf-dev procps dnsmasq-base fonts-dejavu-core
          chromium chromium-driver haproxy exabgp bird2 prometheus python3-websockets
          valgrind sngrep tshark lintian)
# Services shipped by the packages above (names differ between releases;
# absent ones are skipped).
SERVICES=(kamailio etcd rtpengine-daemon rtpengine rtpengine-recording-daemon haproxy bird exabgp prometheus)
# Daemon binaries to kill when there is no service manager to ask.
DAEMONS=(kamailio etcd rtpengine rtpengine-recording haproxy bird exabgp prometheus)

log() { printf '[setup] %s\n' "$*"; }

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
    log "not root: using sudo"
else
    log "error: need root or sudo to install packages" >&2
    exit 1
fi
run() {
    log "+ $*"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive "$@"
}

# --- packages -----------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
    if dpkg -s "$p" >/dev/null 2>&1; then
        log "package $p: installed"
    else
        log "package $p: missing"
        missing+=("$p")
    fi
done

# npm installs SIP.js for the browser test. A machine whose Node.js came
# with its own npm (NodeSource) has it already; Debian's `npm` is only added
# where there is none, since it would pull Debian's nodejs over that one.
if command -v npm >/dev/null 2>&1; then
    log "npm: $(command -v npm)"
else
    log "package npm: missing"
    missing+=(npm)
fi

if [ "${#missing[@]}" -gt 0 ]; then
    run apt-get update
    # policy-rc.d 101 keeps postinst scripts from starting daemons on
    # non-systemd machines; with systemd we stop them below instead.
    created_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        log "temporarily forbidding service starts (/usr/sbin/policy-rc.d)"
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
        "${SUDO[@]}" chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
    fi
    rc=0
    run apt-get install -y --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${missing[@]}" || rc=$?
    if [ "$created_policy" -eq 1 ]; then
        "${SUDO[@]}" rm -f /usr/sbin/policy-rc.d
    fi
    if [ "$rc" -ne 0 ]; then
        log "error: apt-get install failed ($rc)" >&2
        exit "$rc"
    fi
else
    log "all packages present: skipping apt-get"
fi

# --- keep distro daemons off the testbed's ports --------------------------------
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    for s in "${SERVICES[@]}"; do
        if systemctl list-unit-files "$s.service" 2>/dev/null | grep -q "^$s.service"; then
            run systemctl stop "$s.service" || true
            run systemctl disable "$s.service" >/dev/null 2>&1 || true
        fi
    done
else
    # Without systemd, only stop a service whose own pidfile names a live
    # process: the init scripts fall back to matching by executable, which
    # would also kill kamailio/etcd/rtpengine instances a test started.
    log "no running systemd: checking init-script pidfiles"
    for entry in kamailio:/run/kamailio/kamailio.pid etcd:/run/etcd.pid \
                 rtpengine-daemon:/run/rtpengine.pid \
                 rtpengine-recording-daemon:/run/rtpengine-recording.pid \
                 haproxy:/run/haproxy.pid bird:/run/bird/bird.pid \
                 prometheus:/run/prometheus.pid; do
        s=${entry%%:*}
        pidfile=${entry#*:}
        if [ -x "/etc/init.d/$s" ] && [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            run service "$s" stop || true
        else
            log "service $s: not running"
        fi
    done
fi
# Anything still running was started outside the service manager (or the
# init script failed to stop it): kill it by exact name, owned by the
# package's system user only, so a developer's own instances survive.
for d in "${DAEMONS[@]}"; do
    for u in kamailio etcd rtpengine haproxy bird exabgp prometheus; do
        if pgrep -x -u "$u" "$d" >/dev/null 2>&1; then
            log "killing leftover $d owned by $u"
            "${SUDO[@]}" pkill -x -u "$u" "$d" || true
        fi
    done
done

# --- report ---------------------------------------------------------------------
busy=0
for port in 5060 2379 22222; do
    if ss -Hlnu "sport = :$port" 2>/dev/null | grep -q . || ss -Hlnt "sport = :$port" 2>/dev/null | grep -q .; then
        log "warning: port $port is still in use:"
        ss -lnptu "sport = :$port" || true
        busy=1
    fi
done
[ "$busy" -eq 0 ] && log "ports 5060, 2379, 22222 are free"

for b in sipp kamailio rtpengine etcd protoc chromium chromedriver haproxy exabgp bird birdc promtool prometheus; do
    if command -v "$b" >/dev/null 2>&1; then
        log "found $b: $(command -v "$b")"
    else
        log "warning: $b not on PATH"
    fi
done
log "done"
