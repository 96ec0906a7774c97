#!/usr/bin/env bash
# Before against after, in one run: two weft binaries on make bench's
# single-process MLP job (`weft train`), the same job without a strategy
# through a master and one worker (`weft local --workers=1`), and make
# bench's MULTI_WORKER_MIRRORED job (`weft local --workers=2`), alternating
# which binary goes first each round, so a slow spell of the machine hits
# both. For changes that must not cost speed
# (a restructuring): build the old commit's binary, keep a copy, then
#
#   bench/ab.sh OLD_WEFT NEW_WEFT [ROUNDS]      (default 5 rounds)
#
# prints each side's median, min and max samples/s and the ratio new/old per
# job. Environment: DATA_DIR (default /usr/share/datasets/fashion-mnist).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bench/ab.sh OLD_WEFT NEW_WEFT [ROUNDS]" >&2; exit 2; }
BENCH_NAME=ab.sh
WEFT="$2"
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${3:-5}"
DATA_DIR="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-ab.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
# Private copies: a concurrent build cannot swap a binary mid-run.
cp "$1" "$TMP/old"
cp "$2" "$TMP/new"

{ mlp_job ab-single 64 1; printf 'seed: 1\neval { skip: true }\n'; } > "$TMP/single.pbtxt"
{ mlp_job ab-mwm 128 1; printf 'seed: 1\nstrategy { kind: MULTI_WORKER_MIRRORED }\n'; } > "$TMP/mwm.pbtxt"

run() {  # run SIDE JOB
  local out
  if [ "$2" = single ]; then
    out="$(timeout 600 "$TMP/$1" train "$TMP/single.pbtxt" --output=json 2> "$TMP/err" | grep '^{' | tail -n1)" || true
  elif [ "$2" = master ]; then
    out="$(timeout 600 "$TMP/$1" local --workers=1 "$TMP/single.pbtxt" --output=json 2> "$TMP/err" | grep '^{' | tail -n1)" || true
  else
    out="$(timeout 600 "$TMP/$1" local --workers=2 "$TMP/mwm.pbtxt" --output=json 2> "$TMP/err" | grep '^{' | tail -n1)" || true
  fi
  if [ -z "$out" ]; then
    echo "ab.sh: $1 failed on the $2 job:" >&2
    tail -n 20 "$TMP/err" >&2
    exit 1
  fi
  echo "$1 $2 $out" >> "$TMP/results"
}

: > "$TMP/results"
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < ROUNDS; r++)); do
  for job in single master mwm; do
    if ((r % 2 == 0)); then run old "$job"; run new "$job"; else run new "$job"; run old "$job"; fi
  done
  echo "ab.sh: round $((r + 1))/$ROUNDS done" >&2
done
/usr/bin/python3 - "$TMP/results" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    side, job, js = line.split(" ", 2)
    rows.setdefault((job, side), []).append(json.loads(js)["samples_per_second"])
print("| job | old median samples/s (min-max) | new median (min-max) | new/old |")
print("|---|---:|---:|---:|")
for job, name in (("single", "single process (`weft train`)"), ("master", "no strategy, master + 1 worker"),
                  ("mwm", "MULTI_WORKER_MIRRORED, 2 workers")):
    o, n = rows[(job, "old")], rows[(job, "new")]
    print(f"| {name} | {statistics.median(o):,.0f} ({min(o):,.0f}-{max(o):,.0f}) | "
          f"{statistics.median(n):,.0f} ({min(n):,.0f}-{max(n):,.0f}) | {statistics.median(n) / statistics.median(o):.3f} |")
print(f"\n{len(rows[('single', 'old')])} rounds; load average {sys.argv[2]} before, {sys.argv[3]} after.")
PY
