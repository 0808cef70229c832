#!/usr/bin/env bash
# The routing core's regression guard (issue 41): instructions per call of
# `sip-gate/examples/calls` (five messages a call: INVITE, 200, ACK, BYE,
# 200) counted by callgrind, which is exact whatever the machine's load, so
# it needs no quiet machine. Compared with the figure kept in
# bench/callgrind-per-call.txt: more than 3% above it fails; more than 3%
# below it asks for the figure to be lowered, so a gain is kept.
#
#   scripts/callgrind-guard.sh           # check
#   scripts/callgrind-guard.sh --update  # write today's figure to the file
#
# The release build goes to its own target directory (CALLGRIND_TARGET_DIR,
# default target/callgrind).
#
# CALLGRIND_CALLS sets the number of calls (default 5000: about 5 s under
# valgrind; the per-call figure moves by under 0.1% from run to run).
set -euo pipefail
cd "$(dirname "$0")/.."

calls="${CALLGRIND_CALLS:-5000}"
figure_file=bench/callgrind-per-call.txt
tolerance_pct=3

command -v valgrind >/dev/null || {
    echo "[callgrind-guard] valgrind is not installed (scripts/setup.sh installs it)" >&2
    exit 1
}

target_dir="${CALLGRIND_TARGET_DIR:-${CARGO_TARGET_DIR:-target}/callgrind}"
CARGO_TARGET_DIR="$target_dir" cargo build --release --locked --quiet -p sip-gate --example calls
out="$(mktemp -t callgrind-guard.XXXXXX)"
trap 'rm -f "$out"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$out" \
    --toggle-collect='calls::play*' "$target_dir/release/examples/calls" "$calls" \
    >/dev/null 2>&1
# The instructions collected while `play` ran (the file's `totals:` line).
total="$(awk '$1 == "totals:" { print $2 }' "$out")"
[[ "$total" =~ ^[0-9]+$ ]] || {
    echo "[callgrind-guard] no instruction total in callgrind's output" >&2
    exit 1
}
per_call=$(( total / calls ))

if [[ "${1:-}" == "--update" ]]; then
    echo "$per_call instructions per call, $(rustc --version)" >"$figure_file"
    echo "[callgrind-guard] $per_call instructions per call written to $figure_file"
    exit 0
fi

kept="$(grep -Eo '^[0-9]+' "$figure_file" | head -1)"
kept_rustc="$(sed -n '1s/^[0-9]* instructions per call, //p' "$figure_file")"
[[ -n "$kept" ]] || {
    echo "[callgrind-guard] $figure_file holds no figure" >&2
    exit 1
}
# Percent change against the kept figure, to a tenth.
change="$(awk -v a="$per_call" -v b="$kept" 'BEGIN { printf "%+.1f", (a - b) * 100 / b }')"
echo "[callgrind-guard] routing core: $per_call instructions per call ($calls calls), kept figure $kept ($change%)"
if (( per_call * 100 > kept * (100 + tolerance_pct) )); then
    echo "[callgrind-guard] FAIL: more than ${tolerance_pct}% above the figure in $figure_file." >&2
    echo "[callgrind-guard] Find what the change added (callgrind_annotate --inclusive=yes on a run of" >&2
    echo "[callgrind-guard] target/release/examples/calls with --toggle-collect='calls::play*'), or, if the" >&2
    echo "[callgrind-guard] cost is wanted, raise the figure with --update and say why in the commit." >&2
    echo "[callgrind-guard] (The figure was taken with $kept_rustc; this is $(rustc --version): another compiler moves it too," >&2
    echo "[callgrind-guard] and so does a CPU of another kind: memchr and BLAKE3 choose their code by its features.)" >&2
    exit 1
fi
if (( per_call * 100 < kept * (100 - tolerance_pct) )); then
    echo "[callgrind-guard] FAIL: more than ${tolerance_pct}% below the figure in $figure_file: keep the gain," >&2
    echo "[callgrind-guard] lower the figure with scripts/callgrind-guard.sh --update in the same commit." >&2
    exit 1
fi
