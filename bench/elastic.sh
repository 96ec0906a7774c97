#!/usr/bin/env bash
# Elastic scale-up (issue 23), called by bench/run.sh; writes the "elastic"
# section of BENCHMARKS.md.
#
# One MULTI_WORKER_MIRRORED job on a local cluster of three workers, elastic
# between 2 and 3, its global batch 192 kept (96 per worker on two, 64 on
# three). `weft scale` moves it between 2 and 3 workers ROUNDS times; in each
# phase, once the members changed, the job's step count is read at the start
# and the end of a window of WINDOW seconds (BENCH_ELASTIC_WINDOW, default 10).
# Reported: samples/s on 2 and on 3 workers in each round, the ratio 3/2 per
# round (median, min, max), and each membership change's pause as the master
# timed it. The MLP 784-256-128-10, SGD at 0.1, one thread per process. What
# a third worker adds depends on cores: on a machine with fewer cores than
# processes the ratio says what the join costs rather than what it gains.
#
# Environment: as bench/run.sh (PYTHON, BENCH_OUT, BENCH_ROUNDS, WEFT).
set -euo pipefail

BENCH_NAME=elastic.sh
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WINDOW="${BENCH_ELASTIC_WINDOW:-10}"
DATA_DIR=/usr/share/datasets/fashion-mnist
for v in ROUNDS WINDOW; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[ -f "$DATA_DIR/train-images-idx3-ubyte.gz" ] || die "no Fashion-MNIST in $DATA_DIR: install dataset-fashion-mnist"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-elastic.XXXXXX")"
CLUSTER_PID=""
cleanup() {
  if [ -n "$CLUSTER_PID" ]; then
    kill -TERM "$CLUSTER_PID" 2>/dev/null || true
    wait "$CLUSTER_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
cp "$WEFT_BIN" "$TMP/weft"  # a concurrent build cannot swap it mid-run
COMMIT="$(git -C "$REPO" rev-parse --short HEAD)"
[ -z "$(git -C "$REPO" status --porcelain)" ] || COMMIT="$COMMIT (with local changes)"

{
  mlp_job bench-elastic 192 100000
  echo 'strategy { kind: MULTI_WORKER_MIRRORED }'
  echo 'elastic { min_workers: 2 max_workers: 3 wait_seconds: -1 }'
} > "$TMP/job.pbtxt"

mkdir "$TMP/cluster"
# The cluster serves until the trap stops it; its first lines say where.
env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$TMP/weft" local --workers=3 --log_dir="$TMP/cluster" \
  2> "$TMP/local.err" &
CLUSTER_PID=$!
for _ in $(seq 600); do
  grep -q '^weft local: serving' "$TMP/local.err" && break
  kill -0 "$CLUSTER_PID" 2>/dev/null || { cat "$TMP/local.err" >&2; die "weft local exited"; }
  sleep 0.1
done
grep -q '^weft local: serving' "$TMP/local.err" || { cat "$TMP/local.err" >&2; die "weft local did not serve in 60 s"; }
MASTER="$(sed -n 's/^weft local: master \([^,]*\),.*/\1/p' "$TMP/local.err")"
export WEFT_MASTER="$MASTER" WEFT_CA="$TMP/cluster/tls/ca.crt" WEFT_CERT="$TMP/cluster/tls/local.crt" \
  WEFT_KEY="$TMP/cluster/tls/local.key"
JOB_ID="$("$TMP/weft" submit "$TMP/job.pbtxt" 2>/dev/null)" || die "weft submit failed"

status() { "$TMP/weft" status "$JOB_ID" --output=json; }
# get EXPR: the Python expression EXPR over the job's status `s`, now.
get() { status | "$PYTHON" -c 'import json, sys; s = json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
# await_members N: until the job trains on N workers and RUNNING.
await_members() {
  for _ in $(seq 1200); do
    [ "$(get 's["state"] + " " + str(len(s["workers"]))')" = "RUNNING $1" ] && return 0
    sleep 0.1
  done
  die "the job did not go to $1 workers in 120 s: $(status)"
}
RESULTS="$TMP/results.txt"  # lines: "<workers> <round> <steps> <seconds>"
: > "$RESULTS"
# window N ROUND: the job's steps over WINDOW seconds on N workers.
window() {
  local s0 s1 t0 t1
  t0="$(date +%s.%N)"; s0="$(get 's["steps"]')"
  sleep "$WINDOW"
  t1="$(date +%s.%N)"; s1="$(get 's["steps"]')"
  echo "$1 $2 $((s1 - s0)) $(awk -v a="$t0" -v b="$t1" "BEGIN { print b - a }")" >> "$RESULTS"
  echo "elastic.sh: round $2, $1 workers: $((s1 - s0)) steps in ${WINDOW} s" >&2
}
for r in $(seq "$ROUNDS"); do
  "$TMP/weft" scale "$JOB_ID" --workers=2 > /dev/null
  await_members 2
  window 2 "$r"
  "$TMP/weft" scale "$JOB_ID" --workers=3 > /dev/null
  await_members 3
  window 3 "$r"
done
status > "$TMP/status.json"
"$TMP/weft" cancel "$JOB_ID" > /dev/null 2>&1 || true

"$PYTHON" - "$RESULTS" "$TMP/status.json" "$TMP/section.md" "$COMMIT" "$WINDOW" <<'PY'
import json, os, statistics, sys
results, status_path, out, commit, window = sys.argv[1:6]
rate = {}
for line in open(results):
    n, r, steps, secs = line.split()
    rate[(int(n), int(r))] = int(steps) * 192 / float(secs)
rounds = sorted({r for _, r in rate})
ratios = [rate[(3, r)] / rate[(2, r)] for r in rounds]
changes = json.load(open(status_path)).get("membership_change", [])
joins = [c.get("seconds", 0) for c in changes if c.get("joined")]
leaves = [c.get("seconds", 0) for c in changes if c.get("left")]
with open(out, "w") as o:
    p = lambda *a: print(*a, file=o)
    p("## Elastic scale-up: one job on 2, then 3 workers (issue 23)")
    p()
    p("MULTI_WORKER_MIRRORED, the MLP 784-256-128-10, global batch 192 (96 per worker on 2, 64 on 3), one")
    p(f"thread per process; `weft scale` moves the running job between 2 and 3 workers, and each phase is timed")
    p(f"over {window} s once its members changed. Samples/s from the job's step count.")
    p()
    p("| round | 2 workers, samples/s | 3 workers, samples/s | 3 / 2 |")
    p("|---:|---:|---:|---:|")
    for r, x in zip(rounds, ratios):
        p(f"| {r} | {rate[(2, r)]:.0f} | {rate[(3, r)]:.0f} | {x:.2f} |")
    p()
    p(f"3 / 2 workers: median **{statistics.median(ratios):.2f}** (min {min(ratios):.2f}, max {max(ratios):.2f}) "
      f"over {len(ratios)} round(s).")
    if joins and leaves:
        p(f"The pause of a change as the master timed it: joins median {statistics.median(joins):.3f} s, "
          f"leaves median {statistics.median(leaves):.3f} s ({len(joins)} and {len(leaves)}).")
    p()
    p(f"The machine's {os.cpu_count()} core(s) run the master and three workers: where they are fewer than")
    p(f"the processes, a third worker adds a share of the all-reduce and no core. weft at {commit}.")
    p("Command: `bench/elastic.sh`.")
PY
"$PYTHON" "$BENCH/bench_md.py" "$OUT" elastic --after accuracy < "$TMP/section.md"
echo "elastic: $(grep -o 'median \*\*[0-9.]*\*\*' "$TMP/section.md") -> ${OUT#"$REPO"/}"
