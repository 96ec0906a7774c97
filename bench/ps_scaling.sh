#!/usr/bin/env bash
# Strategy benchmarks beside bench/strategies.sh (issue 4), called by
# bench/run.sh; writes three sections of BENCHMARKS.md:
#
#   ps-ddp       PARAMETER_SERVER async and sync (2 workers + 1 ps) against
#                PyTorch DDP (gloo, 2 workers) in the same run: samples/s and
#                test accuracy after one epoch.
#   scaling      samples/s for 1, 2 and 4 workers: MULTI_WORKER_MIRRORED,
#                async PARAMETER_SERVER (+1 ps) and DDP.
#   accuracy     test accuracy after the same epochs, weft MULTI_WORKER_MIRRORED
#                over several seeds against DDP, so that a gap can be told from
#                seed-to-seed spread.
#
# Every run: the MLP 784-256-128-10, batch 64 per worker (the global batch is
# 64 x workers), plain SGD at 0.1, one thread per process.
#
# Environment: as bench/run.sh (PEERS_DIR, PYTHON, BENCH_OUT, BENCH_ROUNDS,
# WEFT), and BENCH_ACC_EPOCHS (default 3) and BENCH_ACC_SEEDS (default 3).
set -euo pipefail

BENCH_NAME=ps_scaling.sh
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PEERS_DIR="${PEERS_DIR:-$REPO/../shared/peers}"
ACC_EPOCHS="${BENCH_ACC_EPOCHS:-3}"
ACC_SEEDS="${BENCH_ACC_SEEDS:-3}"
DATA_DIR=/usr/share/datasets/fashion-mnist  # the DDP peer reads it from here too
RUN_TIMEOUT=600
for v in ROUNDS ACC_EPOCHS ACC_SEEDS; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[ -f "$PEERS_DIR/torch_ddp_fmnist.py" ] || die "no DDP peer in $PEERS_DIR: set PEERS_DIR"
[ -f "$DATA_DIR/train-images-idx3-ubyte.gz" ] || die "no Fashion-MNIST in $DATA_DIR: install dataset-fashion-mnist"
"$REPO/tools/install_deps.sh" python3-torch libopenblas0-pthread

TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-ps-scaling.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
cp "$WEFT_BIN" "$TMP/weft"  # a concurrent build cannot swap it mid-run
COMMIT="$(git -C "$REPO" rev-parse --short HEAD)$(if [ -n "$(git -C "$REPO" status --porcelain)" ]; then echo ' (with local changes)'; fi)"

# job FILE WORKERS EPOCHS SEED STRATEGY-TEXT
job() {
  local name
  name="bench-$(basename "$1" .pbtxt)"
  { mlp_job "$name" $((64 * $2)) "$3"; printf 'seed: %s\n%s\n' "$4" "$5"; } > "$1"
}
free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ENV=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1)
RESULTS="$TMP/results.txt"  # lines: "<label> <json>"
: > "$RESULTS"

# weft_run LABEL WORKERS PS JOBFILE
weft_run() {
  local line
  line="$(env "${ENV[@]}" timeout "$RUN_TIMEOUT" "$TMP/weft" local --workers="$2" --ps="$3" "$4" --output=json \
    2> "$TMP/weft.err" | grep '^{' | tail -n1)" || { tail -n 20 "$TMP/weft.err" >&2; die "weft local ($1) failed"; }
  [ -n "$line" ] || { tail -n 20 "$TMP/weft.err" >&2; die "weft local ($1) printed no result"; }
  echo "$1 $line" >> "$RESULTS"
  echo "ps_scaling.sh: $1: ${line:0:150}" >&2
}
# ddp_run LABEL WORKERS EPOCHS [ENV...]: ENV, e.g. glibc's tuning as in
# bench/strategies.sh (PyTorch's per-step tensors kept in glibc's heap).
ddp_run() {
  local line
  line="$(env "${ENV[@]}" "${@:4}" timeout "$RUN_TIMEOUT" "$PYTHON" "$PEERS_DIR/torch_ddp_fmnist.py" --workers "$2" --batch 64 \
    --epochs "$3" --threads 1 --port "$(free_port)" 2> "$TMP/ddp.err" | grep '^{' | tail -n1)" ||
    { tail -n 20 "$TMP/ddp.err" >&2; die "the DDP peer ($1) failed"; }
  echo "$1 $line" >> "$RESULTS"
  echo "ps_scaling.sh: $1: ${line:0:150}" >&2
}

PS_ASYNC='strategy { kind: PARAMETER_SERVER sync: false }'
PS_SYNC='strategy { kind: PARAMETER_SERVER sync: true }'
# The same one step at a time (weft before steps_per_execution 0, which
# sizes each dispatch to ~20 ms of steps, and steps_in_flight became the
# defaults): one step per RunGraph, none queued behind it.
PS_ASYNC1='strategy { kind: PARAMETER_SERVER sync: false steps_per_execution: 1 }'
PS_SYNC1='strategy { kind: PARAMETER_SERVER sync: true steps_per_execution: 1 steps_in_flight: 1 }'
MWM='strategy { kind: MULTI_WORKER_MIRRORED }'

# 1. PARAMETER_SERVER against DDP, 2 workers.
job "$TMP/ps_async.pbtxt" 2 1 1 "$PS_ASYNC"
job "$TMP/ps_sync.pbtxt" 2 1 1 "$PS_SYNC"
job "$TMP/ps_async1.pbtxt" 2 1 1 "$PS_ASYNC1"
job "$TMP/ps_sync1.pbtxt" 2 1 1 "$PS_SYNC1"
LOAD_PS0="$(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < ROUNDS; r++)); do
  for k in 0 1 2 3 4 5; do  # rotate who goes first
    case $(((k + r) % 6)) in
    0) weft_run ps_async 2 1 "$TMP/ps_async.pbtxt" ;;
    1) weft_run ps_sync 2 1 "$TMP/ps_sync.pbtxt" ;;
    2) ddp_run ddp2 2 1 ;;
    3) weft_run ps_async1 2 1 "$TMP/ps_async1.pbtxt" ;;
    4) weft_run ps_sync1 2 1 "$TMP/ps_sync1.pbtxt" ;;
    5) ddp_run ddp2m 2 1 MALLOC_MMAP_THRESHOLD_=2000000000 MALLOC_TRIM_THRESHOLD_=4000000000 ;;
    esac
  done
done
LOAD_PS1="$(cut -d' ' -f1-3 /proc/loadavg)"

# 2. Scaling: 1, 2, 4 workers.
for n in 1 2 4; do
  job "$TMP/mwm$n.pbtxt" "$n" 1 1 "$MWM"
  job "$TMP/psa$n.pbtxt" "$n" 1 1 "$PS_ASYNC"
done
LOAD_SC0="$(cut -d' ' -f1-3 /proc/loadavg)"
for n in 1 2 4; do
  weft_run "scale_mwm_$n" "$n" 0 "$TMP/mwm$n.pbtxt"
  weft_run "scale_psa_$n" "$n" 1 "$TMP/psa$n.pbtxt"
  ddp_run "scale_ddp_$n" "$n" 1
done
LOAD_SC1="$(cut -d' ' -f1-3 /proc/loadavg)"

# 3. Accuracy after the same epochs: weft MWM over seeds, DDP (its seed is fixed).
for ((s = 1; s <= ACC_SEEDS; s++)); do
  job "$TMP/acc$s.pbtxt" 2 "$ACC_EPOCHS" "$s" "$MWM"
  weft_run "acc_weft_$s" 2 0 "$TMP/acc$s.pbtxt"
done
ddp_run acc_ddp 2 "$ACC_EPOCHS"

"$PYTHON" - "$RESULTS" "$TMP" "$COMMIT" "$(nproc)" "$LOAD_PS0" "$LOAD_PS1" "$LOAD_SC0" "$LOAD_SC1" "$ROUNDS" \
  "$ACC_EPOCHS" <<'PY'
import json, statistics, sys
results, tmp, commit, cpus, lps0, lps1, lsc0, lsc1, rounds, acc_epochs = sys.argv[1:]
runs = {}
for line in open(results):
    label, js = line.split(" ", 1)
    runs.setdefault(label, []).append(json.loads(js))
def sps(r): return r.get("samples_per_second", r.get("samples_per_s", 0.0))
def med(label, f): return statistics.median(f(r) for r in runs[label])
acc = lambda r: r["test_accuracy"]

with open(f"{tmp}/ps-ddp.md", "w") as o:
    ddp = max(med("ddp2", sps), med("ddp2m", sps))  # the faster DDP
    p = lambda *a: print(*a, file=o)
    p("## PARAMETER_SERVER against PyTorch DDP (issue 4)")
    p()
    p("The MLP 784-256-128-10, 2 worker processes (+1 ps for weft), batch 64 per worker, SGD at 0.1,")
    p("one epoch, then the test set; `weft local --workers=2 --ps=1` against `torch_ddp_fmnist.py --workers 2`.")
    p("Asynchronous PS applies each worker's gradients as they arrive; synchronous PS applies the")
    p("mean of both once per step. DDP runs as it comes and with glibc's mmap threshold raised")
    p("(as in the MULTI_WORKER_MIRRORED section); the ratios are against the faster of the two.")
    p("weft runs with its defaults (each dispatch sized to ~20 ms of steps; sync: two dispatches in flight)")
    p("and one step at a time (`steps_per_execution: 1`, sync also `steps_in_flight: 1`). samples/s over the training")
    p("steps after the run's first call (its `warmup_seconds`: partitions registered, shards loaded;")
    p("DDP's clock also starts after its setup), median of the rounds. Goal: 1.2x DDP, sync and async.")
    p()
    p("| | median samples/s | min | max | test accuracy (median) | / DDP samples/s |")
    p("|---|---:|---:|---:|---:|---:|")
    for label, name in (("ps_async", "weft PARAMETER_SERVER async"), ("ps_sync", "weft PARAMETER_SERVER sync"),
                        ("ps_async1", "weft PARAMETER_SERVER async, one step per dispatch"),
                        ("ps_sync1", "weft PARAMETER_SERVER sync, one step at a time"),
                        ("ddp2", "PyTorch DDP (gloo)"),
                        ("ddp2m", "PyTorch DDP (gloo), glibc's mmap threshold raised")):
        v = [sps(r) for r in runs[label]]
        p(f"| {name} | {statistics.median(v):,.0f} | {min(v):,.0f} | {max(v):,.0f} | {med(label, acc):.4f} | "
          f"{statistics.median(v) / ddp:.2f} |")
    p()
    p(f"{rounds} rounds, rotating who goes first; load average {lps0} before and {lps1} after, on {cpus} CPUs; "
      f"weft at {commit}. Command: `bench/ps_scaling.sh`.")

with open(f"{tmp}/scaling.md", "w") as o:
    p = lambda *a: print(*a, file=o)
    p("## Scaling with the number of workers (issue 4)")
    p()
    p("samples/s of one epoch of the same MLP, batch 64 per worker (global 64 x workers), one run each.")
    p(f"**This machine has {cpus} CPUs**: with 4 workers (and a ps and the master) the processes share")
    p("them, so these figures show each system's overhead under oversubscription, not how it scales")
    p("on a cluster.")
    p()
    p("| workers | weft MULTI_WORKER_MIRRORED | weft PS async (+1 ps) | PyTorch DDP (gloo) | MWM / DDP | PS async / DDP |")
    p("|---:|---:|---:|---:|---:|---:|")
    for n in (1, 2, 4):
        m, a, d = (med(f"scale_{k}_{n}", sps) for k in ("mwm", "psa", "ddp"))
        p(f"| {n} | {m:,.0f} | {a:,.0f} | {d:,.0f} | {m / d:.2f} | {a / d:.2f} |")
    p()
    p(f"Load average {lsc0} before and {lsc1} after; weft at {commit}.")

with open(f"{tmp}/accuracy.md", "w") as o:
    p = lambda *a: print(*a, file=o)
    seeds = sorted(k for k in runs if k.startswith("acc_weft_"))
    w = [runs[k][0]["test_accuracy"] for k in seeds]
    d = runs["acc_ddp"][0]["test_accuracy"]
    mean = statistics.mean(w)
    p(f"## Accuracy after the same epochs: MULTI_WORKER_MIRRORED against DDP (issue 4)")
    p()
    p(f"2 workers, batch 64 per worker, SGD at 0.1, {acc_epochs} epochs. weft over {len(w)} seeds (initial")
    p("values and shuffling follow the job's seed); the DDP peer fixes its own seed.")
    p()
    p("| | test accuracy |")
    p("|---|---:|")
    for k, a in zip(seeds, w):
        p(f"| weft MULTI_WORKER_MIRRORED, seed {k.rsplit('_', 1)[1]} | {a:.4f} |")
    p(f"| weft, mean (range {min(w):.4f} to {max(w):.4f}) | {mean:.4f} |")
    p(f"| PyTorch DDP (gloo) | {d:.4f} |")
    gap = (mean - d) * 100
    p()
    p(f"Goal: the same accuracy within 0.5 points after the same epochs: "
      f"{'met' if abs(gap) <= 0.5 else '**not met**'} ({abs(gap):.2f} points, weft "
      f"{'higher' if gap > 0 else 'lower'}; weft's seeds span {(max(w) - min(w)) * 100:.2f} points). weft at {commit}.")
PY
"$PYTHON" "$BENCH/bench_md.py" "$OUT" ps-ddp --after mwm-ddp < "$TMP/ps-ddp.md"
"$PYTHON" "$BENCH/bench_md.py" "$OUT" scaling --after ps-ddp < "$TMP/scaling.md"
"$PYTHON" "$BENCH/bench_md.py" "$OUT" accuracy --after scaling < "$TMP/accuracy.md"
echo "ps_scaling: PS, scaling and accuracy sections -> ${OUT#"$REPO"/}"
