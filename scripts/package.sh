#!/usr/bin/env bash
# scripts/package.sh [OUT_DIR]: a release build and three Debian packages,
# sip-gate, media-ctl and ringsync (default OUT_DIR: target/debian).
#
# Built with dpkg-deb from a staged tree: it is on every Debian host and
# needs no other tool to be compiled first (cargo-deb would be another crate
# to build, and it describes one package per crate, while these three share
# a user, a state directory and the site file). Man pages and completions
# come from the binaries' clap definitions (`cargo run -p xtask -- assets`).
#
# ringsync carries what every node of a site shares: the `sip-gate` system
# user, /var/lib/sip-gate, and /etc/sip-gate/site.toml (a conffile: the
# example site on loopback, with the store in /var/lib/sip-gate). sip-gate
# and media-ctl depend on it. No unit is enabled or started by the install:
# the operator edits the site file first (README.md, "Install on a server").
#
# Slow (a release build with thin LTO, 5-8 minutes on 2 cores): not part
# of CI, which checks the units and sd_notify through the debug binaries
# (testbed's tests systemd_units:: and sd_notify::). When lintian is
# installed (scripts/setup.sh installs it) the packages are checked at the
# end and any error or warning fails the build; the tags the packages keep
# on purpose are overridden in deploy/debian/, each with its reason.
#
# DEBFULLNAME and DEBEMAIL (the variables dch reads) name the maintainer.
# PACKAGE_PROFILE=debug packages the debug build instead (seconds, not
# minutes, when the tests have built it): what scripts/test.sh does so CI
# runs lintian on every change; such packages are for checking only.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/target/debian}
cd "$root"

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
arch=$(dpkg --print-architecture)
[ -n "$version" ] || { echo "package.sh: no [workspace.package] version in Cargo.toml" >&2; exit 1; }

maintainer="${DEBFULLNAME:-sip-gate maintainers} <${DEBEMAIL:-maintainers@sip-gate.org}>"
step() { printf '[package] %s\n' "$*" >&2; }

profile=${PACKAGE_PROFILE:-release}
bins="${CARGO_TARGET_DIR:-$root/target}/$profile"
case "$profile" in
    release)
        step "release build of sip-gate, media-ctl and ringsync (thin LTO: minutes on a small machine; cargo's progress follows)"
        cargo build --release --locked -p sip-gate -p media-ctl -p ringsync-ops --bins
        compress=(-Zxz) ;;
    debug)
        step "debug build of sip-gate, media-ctl and ringsync (packages for checking only)"
        cargo build --locked -p sip-gate -p media-ctl -p ringsync-ops --bins
        compress=(-Zgzip -z1) ;;
    *) echo "package.sh: PACKAGE_PROFILE is release or debug, not $profile" >&2; exit 2 ;;
esac
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
step "man pages and completions (xtask assets)"
cargo run --quiet --locked -p xtask -- assets "$stage/assets"
mkdir -p "$out"

# A native package's changelog.gz is a Debian changelog: one entry for this
# version pointing at the project's own CHANGELOG.md (shipped beside it).
debian_changelog() {
    printf '%s (%s) unstable; urgency=medium\n\n  * Release %s; the changes are in\n    /usr/share/doc/%s/CHANGELOG.md.gz.\n\n -- %s  %s\n' \
        "$1" "$version" "$version" "$1" "$maintainer" \
        "$(date -R -u -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")"
}

# shlibs BINARY: the shared-library dependencies of BINARY (dpkg-shlibdeps
# wants a debian/control beside it).
shlibs() {
    local dir="$stage/shlibs"
    mkdir -p "$dir/debian"
    printf 'Source: sip-gate\n\nPackage: sip-gate\nArchitecture: any\n' > "$dir/debian/control"
    (cd "$dir" && dpkg-shlibdeps -O "$1" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
}

# stage PACKAGE BINARY: the tree of one package with its binary, man pages,
# completions, units and docs.
stage() {
    local pkg=$1 bin=$2 tree="$stage/$1"
    step "staging $pkg"
    install -D -m 0755 "$bins/$bin" "$tree/usr/bin/$bin"
    # As dh_strip does for executables (Debian policy 10.1).
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$tree/usr/bin/$bin"
    install -d "$tree/usr/share/man/man1"
    for page in "$stage/assets/man/$bin".1 "$stage/assets/man/$bin"-*.1; do
        [ -e "$page" ] || continue
        gzip -9n -c "$page" > "$tree/usr/share/man/man1/$(basename "$page").gz"
    done
    install -D -m 0644 "$stage/assets/completions/bash/$bin.bash" \
        "$tree/usr/share/bash-completion/completions/$bin"
    install -D -m 0644 "$stage/assets/completions/zsh/_$bin" \
        "$tree/usr/share/zsh/vendor-completions/_$bin"
    install -D -m 0644 "$stage/assets/completions/fish/$bin.fish" \
        "$tree/usr/share/fish/vendor_completions.d/$bin.fish"
    local doc="$tree/usr/share/doc/$pkg"
    install -d "$doc"
    {
        echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        echo "Upstream-Name: $pkg"
        echo
        echo "Files: *"
        echo "Copyright: 2026 the sip-gate authors"
        echo "License: Apache-2.0"
        echo " On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0."
    } > "$doc/copyright"
    debian_changelog "$pkg" | gzip -9n > "$doc/changelog.gz"
    gzip -9n -c CHANGELOG.md > "$doc/CHANGELOG.md.gz"
    if [ -e "deploy/debian/$pkg.lintian-overrides" ]; then
        install -D -m 0644 "deploy/debian/$pkg.lintian-overrides" "$tree/usr/share/lintian/overrides/$pkg"
    fi
    install -d "$tree/DEBIAN"
}

# control PACKAGE DESCRIPTION DEPENDS (the binary's shared libraries added)
control() {
    local tree="$stage/$1"
    local size libs
    size=$(du -sk --exclude=DEBIAN "$tree" | cut -f1)
    libs=$(shlibs "$tree/usr/bin/$1")
    [ -n "$libs" ] || { echo "package.sh: dpkg-shlibdeps found no libraries for $1" >&2; exit 1; }
    cat > "$tree/DEBIAN/control" <<CONTROL
Package: $1
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: $libs, $3
Section: net
Priority: optional
Description: $2
CONTROL
}

# Every package: the user and directory exist before a unit or the CLI runs
# (the CLI as `sudo -u sip-gate ringsync ...` writes the embedded store).
postinst_common='if ! getent passwd sip-gate >/dev/null; then
    adduser --system --group --home /var/lib/sip-gate --no-create-home --quiet sip-gate
fi
install -d -o sip-gate -g sip-gate -m 0750 /var/lib/sip-gate
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi'

# postinst PACKAGE EXTRA UNITS: the common part and EXTRA on configure; a
# prerm that stops UNITS before their files go (each drains on SIGTERM).
postinst() {
    printf '#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n%s\n%s\nfi\n' \
        "$postinst_common" "${2:-}" > "$stage/$1/DEBIAN/postinst"
    chmod 0755 "$stage/$1/DEBIAN/postinst"
    printf '#!/bin/sh\nset -e\nif [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ] && [ "$1" = remove ]; then\n    deb-systemd-invoke stop %s >/dev/null || true\nfi\n' \
        "$3" > "$stage/$1/DEBIAN/prerm"
    chmod 0755 "$stage/$1/DEBIAN/prerm"
}

# --- ringsync: CLI, admin API, agent; the site file, user and state dir ---
stage ringsync ringsync
install -d "$stage/ringsync/usr/share/man/man5"
gzip -9n -c "$stage/assets/man/sip-gate.toml.5" > "$stage/ringsync/usr/share/man/man5/sip-gate.toml.5.gz"
units="$stage/ringsync/lib/systemd/system"
install -D -m 0644 deploy/systemd/ringsync-serve.service "$units/ringsync-serve.service"
install -D -m 0644 deploy/systemd/ringsync-agent@.service "$units/ringsync-agent@.service"
install -d "$stage/ringsync/etc/sip-gate"
{
    echo "# /etc/sip-gate/site.toml: the site file every node of the site runs"
    echo "# (sip-gate, media-ctl, ringsync). Installed as the example site on"
    echo "# loopback; no unit runs until you edit it and enable them (README.md,"
    echo "# \"Install on a server\"). Change [site] secret first."
    echo "#"
    sed 's|^path = "msk-1.profiles.json" .*|path = "/var/lib/sip-gate/site.profiles.json"|' docs/examples/site.toml
} > "$stage/ringsync/etc/sip-gate/site.toml"
grep -q '^path = "/var/lib/sip-gate/site.profiles.json"$' "$stage/ringsync/etc/sip-gate/site.toml" \
    || { echo "package.sh: the example site's store path was not rewritten" >&2; exit 1; }
chmod 0640 "$stage/ringsync/etc/sip-gate/site.toml"
echo /etc/sip-gate/site.toml > "$stage/ringsync/DEBIAN/conffiles"
control ringsync "drain-aware SIP edge: ringsync CLI, admin API and handover agent
 The operator plane of a sip-gate site: drain profiles, status, the audit
 log, the admin API (ringsync serve) and the Active-Passive handover agent.
 Carries the site file /etc/sip-gate/site.toml and the sip-gate user." "adduser"
# The site file holds the site secret: readable by root and the daemons only.
postinst ringsync "chown root:sip-gate /etc/sip-gate/site.toml
chmod 0640 /etc/sip-gate/site.toml" "ringsync-serve.service 'ringsync-agent@*.service'"
# Purge (Debian policy 6.8 and 10.7.3): what the site made of its own goes
# with the configuration: the tokens file, the embedded store, its audit
# log and backups in /var/lib/sip-gate. The site file is a conffile: dpkg
# removes it. The `sip-gate` user stays (files elsewhere may still be owned
# by it, and a reinstall gets the same uid).
cat > "$stage/ringsync/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ "$1" = purge ]; then
    rm -f /etc/sip-gate/tokens.toml /etc/sip-gate/tokens.toml.tmp
    rm -rf /var/lib/sip-gate
    rmdir /etc/sip-gate 2>/dev/null || true
fi
POSTRM
chmod 0755 "$stage/ringsync/DEBIAN/postrm"

# --- sip-gate ---
stage sip-gate sip-gate
install -D -m 0644 deploy/systemd/sip-gate.service "$stage/sip-gate/lib/systemd/system/sip-gate.service"
control sip-gate "drain-aware inline SIP proxy
 Balances new SIP work over a site's instances and drains them without
 dropping a call: 503 with Retry-After for new work, in-dialog requests to
 the instance that holds the dialog." "ringsync (= $version), adduser"
# An upgrade of the package upgrades the running gate in place (R-GW-3):
# nobody's connection is cut. When the gate refuses (the log says why), it
# serves on with the old binary until the operator restarts it.
postinst sip-gate 'if [ -n "$2" ] && [ -d /run/systemd/system ] && systemctl is-active --quiet sip-gate.service; then
    sip-gate upgrade || echo "sip-gate: the running gate did not upgrade (above) and serves on: systemctl restart sip-gate restarts it" >&2
fi' sip-gate.service

# --- media-ctl ---
stage media-ctl media-ctl
install -D -m 0644 deploy/systemd/media-ctl.service "$stage/media-ctl/lib/systemd/system/media-ctl.service"
control media-ctl "drain-aware controller for rtpengine media gateways
 Places new calls on the site's rtpengine media gateways (ng protocol) and
 sheds a draining one over a window, its calls left where they are." "ringsync (= $version), adduser"
postinst media-ctl "" media-ctl.service

debs=()
for pkg in ringsync sip-gate media-ctl; do
    step "building $out/${pkg}_${version}_${arch}.deb"
    dpkg-deb --root-owner-group "${compress[@]}" --build "$stage/$pkg" "$out/${pkg}_${version}_${arch}.deb" >/dev/null
    debs+=("$out/${pkg}_${version}_${arch}.deb")
done
if command -v lintian >/dev/null 2>&1; then
    step "lintian"
    lintian --fail-on error,warning --allow-root "${debs[@]}"
else
    step "lintian not installed: packages not checked (scripts/setup.sh installs it)"
fi
ls -l "${debs[@]}"
