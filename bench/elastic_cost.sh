#!/usr/bin/env bash
# What being elastic costs a job that never changes its members (issue 23),
# called by bench/run.sh; writes the "elastic-cost" section of BENCHMARKS.md.
#
# An elastic job makes each step whole or nothing: its updates wait on a
# commit barrier (on the first ps for PARAMETER_SERVER, one per async
# replica) and a step counter is incremented with them (master/elastic_plan.h).
# This runs the same job with and without `elastic { min_workers: 1
# max_workers: 2 }` on `weft local --workers=2` (+1 ps for PARAMETER_SERVER):
# MULTI_WORKER_MIRRORED, PARAMETER_SERVER async and sync; ROUNDS rounds,
# alternating which of each pair goes first. The MLP 784-256-128-10, batch 64
# per worker, SGD at 0.1, EPOCHS epochs (BENCH_ELASTIC_EPOCHS, default 2), one
# thread per process, weft's default dispatch sizes. Reported: samples/s of
# each (median, min, max) and elastic / plain per round (median, min, max).
#
# Environment: as bench/run.sh (PYTHON, BENCH_OUT, BENCH_ROUNDS, WEFT).
set -euo pipefail

BENCH_NAME=elastic_cost.sh
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
EPOCHS="${BENCH_ELASTIC_EPOCHS:-2}"
DATA_DIR=/usr/share/datasets/fashion-mnist
RUN_TIMEOUT=600
for v in ROUNDS EPOCHS; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[ -f "$DATA_DIR/train-images-idx3-ubyte.gz" ] || die "no Fashion-MNIST in $DATA_DIR: install dataset-fashion-mnist"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-elastic-cost.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
cp "$WEFT_BIN" "$TMP/weft"  # a concurrent build cannot swap it mid-run
COMMIT="$(git -C "$REPO" rev-parse --short HEAD)"
[ -z "$(git -C "$REPO" status --porcelain)" ] || COMMIT="$COMMIT (with local changes)"

STRATEGIES=(mwm ps_async ps_sync)
declare -A STRATEGY=(
  [mwm]='strategy { kind: MULTI_WORKER_MIRRORED }'
  [ps_async]='strategy { kind: PARAMETER_SERVER sync: false }'
  [ps_sync]='strategy { kind: PARAMETER_SERVER sync: true }'
)
declare -A PS=([mwm]=0 [ps_async]=1 [ps_sync]=1)
for s in "${STRATEGIES[@]}"; do
  { mlp_job "bench-$s" 128 "$EPOCHS"; echo 'seed: 1'; echo "${STRATEGY[$s]}"; } > "$TMP/$s-plain.pbtxt"
  { cat "$TMP/$s-plain.pbtxt"; echo 'elastic { min_workers: 1 max_workers: 2 }'; } > "$TMP/$s-elastic.pbtxt"
done

RESULTS="$TMP/results.txt"  # lines: "<strategy> <plain|elastic> <round> <samples/s>"
: > "$RESULTS"
# run STRATEGY MODE ROUND
run() {
  local line
  line="$(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout "$RUN_TIMEOUT" "$TMP/weft" local --workers=2 \
    --ps="${PS[$1]}" "$TMP/$1-$2.pbtxt" --output=json 2> "$TMP/weft.err" | grep '^{' | tail -n1)" ||
    { tail -n 20 "$TMP/weft.err" >&2; die "weft local ($1, $2) failed"; }
  line="$("$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1]); assert r["state"] == "SUCCEEDED", r
print(r["samples_per_second"])' "$line")" || { tail -n 20 "$TMP/weft.err" >&2; die "weft local ($1, $2) failed"; }
  echo "$1 $2 $3 $line" >> "$RESULTS"
  echo "elastic_cost.sh: round $3, $1, $2: $line samples/s" >&2
}
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  for s in "${STRATEGIES[@]}"; do
    if ((r % 2)); then run "$s" plain "$r"; run "$s" elastic "$r"; else run "$s" elastic "$r"; run "$s" plain "$r"; fi
  done
done
LOAD1="$(cut -d' ' -f1-3 /proc/loadavg)"

"$PYTHON" - "$RESULTS" "$TMP/section.md" "$COMMIT" "$EPOCHS" "$LOAD0" "$LOAD1" <<'PY'
import os, statistics, sys
results, out, commit, epochs, load0, load1 = sys.argv[1:7]
v = {}
for line in open(results):
    s, mode, r, x = line.split()
    v[(s, mode, int(r))] = float(x)
names = {"mwm": "MULTI_WORKER_MIRRORED", "ps_async": "PARAMETER_SERVER async (+1 ps)",
         "ps_sync": "PARAMETER_SERVER sync (+1 ps)"}
rounds = sorted({r for _, _, r in v})
with open(out, "w") as o:
    p = lambda *a: print(*a, file=o)
    p("## What being elastic costs a job whose members do not change (issue 23)")
    p()
    p("The same job with and without `elastic { min_workers: 1 max_workers: 2 }` on `weft local --workers=2`:")
    p("an elastic job's updates wait on a commit barrier (for PARAMETER_SERVER on the first ps, one per async")
    p("replica) and count the step, so that a worker lost mid-step leaves no half-applied step. The MLP")
    p(f"784-256-128-10, batch 64 per worker, SGD at 0.1, {epochs} epochs, one thread per process, weft's default")
    p("dispatch sizes; samples/s as `weft local --output=json` reports it. Each round runs each pair back to")
    p("back, alternating which goes first.")
    p()
    p("| 2 workers | plain samples/s: median (min, max) | elastic samples/s: median (min, max) "
      "| elastic / plain per round: median (min, max) |")
    p("|---|---:|---:|---:|")
    for s, name in names.items():
        plain = [v[(s, "plain", r)] for r in rounds]
        el = [v[(s, "elastic", r)] for r in rounds]
        ratio = [e / q for e, q in zip(el, plain)]
        f = lambda xs: f"{statistics.median(xs):,.0f} ({min(xs):,.0f}, {max(xs):,.0f})"
        p(f"| {name} | {f(plain)} | {f(el)} | **{statistics.median(ratio):.2f}** "
          f"({min(ratio):.2f}, {max(ratio):.2f}) |")
    p()
    p(f"{len(rounds)} round(s); load average {load0} before and {load1} after, on {os.cpu_count()} CPUs; weft at "
      f"{commit}. Command: `bench/elastic_cost.sh`.")
PY
"$PYTHON" "$BENCH/bench_md.py" "$OUT" elastic-cost --after elastic < "$TMP/section.md"
echo "elastic_cost: $(grep -c '^| [MP]' "$TMP/section.md") strategies -> ${OUT#"$REPO"/}"
