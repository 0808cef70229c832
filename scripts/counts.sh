#!/usr/bin/env bash
# The counts of issue 42 ("one way to do each thing"), each by a command
# stated beside it so a figure can be checked by hand. docs/maintenance.md
# holds the table of these figures before and after.
#
#   scripts/counts.sh [--list] [--no-dup] [DIR]
#
# DIR: the tree to count (default: this checkout); a tree that is not a git
# checkout (`git archive REV | tar -x -C DIR`) is read file by file.
# --list: also the places behind each count of functions and files.
# --no-dup: skip the repeated-run scan (`duplicates`, the slowest part).
#
# Functions are found by scripts/counts-fns.pl (a `fn` to where its braces
# close; its tests of a function's text are stated there). Test code is
# every file below a `tests/` or `benches/` folder, and the harness,
# testbed/. Production code is the `src/` of sip-gate, media-ctl, ringsync
# and ringsync-ops.
# No pipefail: `| head` and `| grep -q` end their writers early on purpose.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
list=0 dup=1 dir=
for a in "$@"; do
    case $a in
        --list) list=1 ;;
        --no-dup) dup=0 ;;
        -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) dir=$a ;;
    esac
done
cd "${dir:-$here/..}"

# The Rust files of the tree: git's tracked ones, else all but target/.
if git rev-parse --show-toplevel >/dev/null 2>&1 && [ "$(git rev-parse --show-toplevel)" = "$PWD" ]; then
    rs_files() { git ls-files '*.rs'; }
else
    rs_files() { find . -name '*.rs' -not -path './target/*' | sed 's|^\./||' | sort; }
fi
test_code='(^|/)(tests|benches)/|^testbed/'
prod_code='^(sip-gate|media-ctl|ringsync|ringsync-ops)/src/'
fns=$(mktemp)
trap 'rm -f "$fns"' EXIT
rs_files | perl "$here/counts-fns.pl" >"$fns"

row() { printf '%-58s %s\n' "$1" "$2"; }
places() { [ "$list" = 1 ] && sed 's/^/    /' || true; }
# tagged TAG: the functions the scanner tagged TAG, `file:line name`.
tagged() { awk -F'\t' -v t="$1" '$5 ~ "(^|,)" t "(,|$)" {print $1 ":" $2 " " $4}' "$fns"; }
count() { grep -c . || true; }

echo "# counts of issue 42 in $PWD ($(git rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout'))"

# 1. Crates linked by sip-gate: `cargo tree -e normal -p sip-gate
# --prefix none`, each `name version` once (sip-gate itself included).
crates() { cargo tree -q -e normal -p sip-gate --prefix none "$@" | awk '{print $1, $2}' | sort -u | wc -l; }
row "crates linked by sip-gate (default features)" "$(crates)"
row "crates linked by sip-gate (no etcd: --no-default-features)" "$(crates --no-default-features)"
# The same with the build dependencies (`-e normal,build`: prost-build and
# the protoc it needs come with etcd at build time).
row "crates built for sip-gate, build deps too (default)" "$(crates -e build)"
row "crates built for sip-gate, build deps too (no etcd)" "$(crates -e build --no-default-features)"

# 2. Lines of each daemon's main.rs: `wc -l */src/main.rs` (xtask is no daemon).
for m in */src/main.rs; do
    case $m in xtask/*) continue ;; esac
    row "lines of $m" "$(wc -l <"$m")"
done

# 3. Launchers: test-code functions outside testbed/src/bins that build a
# `Command` for sip-gate, media-ctl or ringsync and `.spawn()` it without
# waiting for its output (a daemon, not a CLI run).
tagged launcher | grep -E "$test_code" >"$fns.l" || true
row "launchers of the daemons in tests besides bins::Node" "$(count <"$fns.l")"
places <"$fns.l"

# 4. HTTP clients. By hand: a file that writes an HTTP/1.x request line
# itself (`"GET /path HTTP/1.1\r\n`), WebSocket upgrade requests (what the
# gate's handshake tests send) and testbed/src/http.rs (the one client)
# excepted. Through a library: production files that build a hyper client.
hand_http() {
    rs_files | grep -Ev '^testbed/src/http\.rs$' | xargs grep -lE '"(GET|POST|PUT|DELETE|\{method\}) [^ "]* HTTP/1\.[01]\\r\\n' |
        while read -r f; do
            grep -E '"(GET|POST|PUT|DELETE|\{method\}) [^ "]* HTTP/1\.[01]\\r\\n' "$f" | grep -qvE 'Upgrade|Sec-WebSocket|/sip HTTP|GET / HTTP/1\.1\\r\\nHost: x' && echo "$f"
        done
}
hand_http | grep -E "$test_code" >"$fns.h" || true
row "hand-written HTTP clients in tests" "$(count <"$fns.h")"
places <"$fns.h"
hand_http | grep -E "$prod_code" >"$fns.h" || true
rs_files | grep -E "$prod_code" | xargs grep -lE 'hyper::client::conn|hyper_util::client' >>"$fns.h" || true
row "HTTP clients in production (hand-written + hyper)" "$(sort -u "$fns.h" | count) ($(hand_http | grep -cE "$prod_code" || true) by hand)"
places <"$fns.h"

# 5. Sites: helper functions (not tests) that write a site file's text by
# hand (a `[site]` header; testbed/src/fixture.rs, the config loader's own
# tests and xtask excepted), and the files that use testbed::fixture::SiteFile.
tagged site-builder >"$fns.l"
row "named site builders (a [site] header by hand)" "$(count <"$fns.l")"
places <"$fns.l"
rs_files | grep -v '^testbed/src/fixture\.rs$' | xargs grep -l '\bSiteFile\b' >"$fns.l" || true
row "files using SiteFile" "$(count <"$fns.l")"
places <"$fns.l"

# 6. Test binaries: `cargo metadata`, the lib/bin/test/example targets with
# `test = true` (each is its own binary that `cargo test` links and runs);
# integration crates are the `test` targets among them.
cargo metadata -q --no-deps --format-version 1 |
    jq -r '.packages[] | .name as $p | .targets[] | select(.test and (.kind[0] | IN("lib","bin","test","example","proc-macro"))) | "\(.kind[0])\t\($p) \(.name)"' >"$fns.l"
row "test binaries" "$(count <"$fns.l") ($(grep -c '^test' "$fns.l" || true) integration crates)"
places <"$fns.l"

# 7. Helpers written more than once: poll loops (a function named wait*,
# poll*, until*, eventually*, retry* whose loop sleeps until a limit), CLI
# runners (a function that runs sip-gate, media-ctl or ringsync to its end:
# `.output()`, `.status()`, `wait_with_output`), Prometheus text parsers
# (a function reading a sample out of exposition text by itself, beside
# testbed/src/metrics.rs).
for t in poll cli-runner prometheus-parser; do
    tagged "$t" | grep -E "$test_code|$prod_code" >"$fns.l" || true
    row "$t helpers" "$(count <"$fns.l")"
    places <"$fns.l"
done

# 8. Sleeps in tests against paused clocks: `sleep(` calls in */tests/,
# and `start_paused`/`time::pause()` anywhere.
row "sleep( calls in */tests/" "$(rs_files | grep -E '(^|/)tests/' | xargs grep -ho '\bsleep(' | count)"
row "paused clocks (start_paused, time::pause())" "$(rs_files | xargs grep -hoE 'start_paused|time::pause\(\)' | count)"

# 9. `#[path]` attributes: `grep '#\[path'`.
rs_files | xargs grep -n '#\[path' >"$fns.l" || true
row "#[path] attributes" "$(count <"$fns.l")"
places <"$fns.l"

# 10. Repeated runs: `duplicates --min-lines 6` over the tree, the pairs it counts.
if [ "$dup" = 1 ]; then
    row "repeated-run pairs (duplicates, 6+ lines)" "$(duplicates --repo . --seconds 300 --most 1 | head -1)"
fi

# 11. The longest files and functions (`wc -l`; the scanner's lengths).
echo "longest files (lines):"
rs_files | xargs wc -l | grep -v ' total$' | sort -rn | head -10 | sed 's/^/    /'
echo "longest functions (lines):"
sort -t$'\t' -k3,3nr "$fns" | head -10 | awk -F'\t' '{printf "    %5d %s:%d %s\n", $3, $1, $2, $4}'
row "files over 600 lines" "$(rs_files | xargs wc -l | grep -v ' total$' | awk '$1 > 600' | count)"
row "functions over 80 lines" "$(awk -F'\t' '$3 > 80' "$fns" | count)"
rm -f "$fns.l" "$fns.h"
