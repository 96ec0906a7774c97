#!/usr/bin/env bash
# The distribution-strategy benchmarks (issue 4), called by bench/run.sh;
# writes the "allreduce", "mwm-ddp" and "mwm-cnn-ddp" sections of BENCHMARKS.md.
#
#   1. bench/allreduce.sh: weft's ring all-reduce against gloo and OpenMPI.
#   2. MULTI_WORKER_MIRRORED against PyTorch DDP (gloo): the MLP
#      784-256-128-10, 2 workers, batch 64 per worker, plain SGD at 0.1, one
#      epoch, each side evaluated on the test set after it; BENCH_ROUNDS rounds,
#      alternating which goes first. weft runs as `weft local --workers=2`, so
#      its figure includes the ring between two worker processes (through
#      shared memory) and the master's dispatch of every step.
#      A third weft row all-reduces the gradients as float16
#      (mixed_precision.float16_all_reduce).
#   3. MULTI_WORKER_MIRRORED against DDP again, with the convolutional
#      network of examples/fmnist_cnn.pbtxt (Adam at 1e-3), against
#      bench/torch_ddp_cnn.py, the same network under DDP; writes the
#      "mwm-cnn-ddp" section.
#
# Environment: as bench/run.sh (PEERS_DIR, PYTHON, BENCH_OUT, BENCH_ROUNDS, WEFT),
# and STRATEGIES_PARTS: the parts to run, default "allreduce mwm cnn" (the other
# parts' sections and plots are left as they are).
set -euo pipefail

BENCH_NAME=strategies.sh
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PEERS_DIR="${PEERS_DIR:-$REPO/../shared/peers}"
PARTS="${STRATEGIES_PARTS:-allreduce mwm cnn}"
DATA_DIR=/usr/share/datasets/fashion-mnist  # the DDP peer reads it from here too
[ -f "$PEERS_DIR/torch_ddp_fmnist.py" ] || die "no DDP peer in $PEERS_DIR: set PEERS_DIR"
"$REPO/tools/install_deps.sh" python3-matplotlib python3-torch libopenblas0-pthread

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ENV=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1)
# PyTorch frees and re-allocates its large tensors every step, and glibc
# serves those from fresh mmap()s that fault in page by page, which this
# kind of VM makes dear. weft's caching allocator avoids that, so the DDP
# peers also run with glibc told to keep such memory in its heap ("ddpm"),
# and the goals' ratios are taken against the faster of the two.
TUNED=(MALLOC_MMAP_THRESHOLD_=2000000000 MALLOC_TRIM_THRESHOLD_=4000000000)

# ddp_run OUT SCRIPT TIMEOUT WHO: one run of the DDP peer SCRIPT (2 workers,
# batch 64, one epoch, one thread each), appended to OUT as "WHO <json>";
# WHO ddpm runs it with glibc tuned.
ddp_run() {
  local out="$1" script="$2" limit="$3" who="$4" tuned=() line
  if [ "$who" = ddpm ]; then tuned=("${TUNED[@]}"); fi
  line="$(env "${ENV[@]}" "${tuned[@]}" timeout "$limit" "$PYTHON" "$script" --workers 2 --batch 64 \
    --epochs 1 --threads 1 --port "$(free_port)" 2> "$TMP/ddp.err" | grep '^{' | tail -n1)" ||
    { tail -n 20 "$TMP/ddp.err" >&2; die "the DDP peer $(basename "$script") failed"; }
  echo "$who $line" >> "$out"
}

TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-strategies.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
cp "$WEFT_BIN" "$TMP/weft"

# 1. All-reduce.
if part allreduce; then
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
"$BENCH/allreduce.sh" > "$TMP/allreduce.txt"
{
  echo "## Ring all-reduce against gloo and OpenMPI (issues 4 and 21)"
  echo
  echo "float32, one process per rank, all on this host; each figure is the median over"
  echo "rounds of each implementation's median time per call (the slowest rank's)."
  echo "weft: the ring over shared-memory rings, as workers on one host run it;"
  echo "weft over its sockets: \`--transport=socket\`, the path between hosts (here over"
  echo "loopback), with mutual TLS as in a cluster; weft over gRPC: \`--transport=grpc\`"
  echo "(\`--collective_transport=grpc\`), also with mutual TLS. gloo and MPI are plaintext."
  echo "busbw = bytes x 2(n-1)/n / time, as nccl-tests. Ratios below 1: weft"
  echo "is faster; the goals are weft/gloo at most 0.7 at every point and weft/mpi at"
  echo "most 1.5 at 4 MiB. The last two columns are what one weft call costs all its"
  echo "ranks together (user + system CPU time and context switches, the barrier"
  echo "before each call included, by getrusage)."
  echo
  grep -v '^load ' "$TMP/allreduce.txt"
  echo
  echo "![all-reduce time per call](bench/plots/allreduce.png)"
  echo
  echo "Command: \`bench/allreduce.sh\` (3 rounds of 10 reps after warm-up). Load average"
  echo "$LOAD0 before and $(cut -d' ' -f1-3 /proc/loadavg) after, on $(nproc) CPUs."
  echo "weft at $(git -C "$REPO" rev-parse --short HEAD)."
} > "$TMP/allreduce.md"
"$PYTHON" "$BENCH/bench_md.py" "$OUT" allreduce < "$TMP/allreduce.md"
fi

# 2. MULTI_WORKER_MIRRORED against DDP.
if part mwm; then
{
  mlp_job bench-mwm 128 1
  echo 'seed: 1'
  echo 'strategy { kind: MULTI_WORKER_MIRRORED }'
} > "$TMP/mwm.pbtxt"
# The same one step at a time: one step per dispatch, none queued behind it
# (weft before steps_per_execution 0 and steps_in_flight became the default).
sed 's/strategy { kind: MULTI_WORKER_MIRRORED }/strategy { kind: MULTI_WORKER_MIRRORED steps_per_execution: 1 steps_in_flight: 1 }/' \
  "$TMP/mwm.pbtxt" > "$TMP/mwm1.pbtxt"
# The same job with its gradients all-reduced as float16 (half the bytes).
{ cat "$TMP/mwm.pbtxt"; echo "mixed_precision { float16_all_reduce: true }"; } > "$TMP/mwm16.pbtxt"
: > "$TMP/mwm_results.txt"
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < ROUNDS; r++)); do
  for k in 0 1 2 3 4; do
    case $(((k + r) % 5)) in
    0 | 1 | 4)
      job="$TMP/mwm.pbtxt"; who=weft
      if (((k + r) % 5 == 1)); then job="$TMP/mwm1.pbtxt"; who=weft1; fi
      if (((k + r) % 5 == 4)); then job="$TMP/mwm16.pbtxt"; who=weft16; fi
      line="$(env "${ENV[@]}" timeout 600 "$TMP/weft" local --workers=2 "$job" --output=json 2> "$TMP/weft.err" | grep '^{' | tail -n1)" ||
        { tail -n 20 "$TMP/weft.err" >&2; die "weft local failed"; }
      echo "$who $line" >> "$TMP/mwm_results.txt"
      ;;
    *)
      who=ddp; if (((k + r) % 5 == 3)); then who=ddpm; fi
      ddp_run "$TMP/mwm_results.txt" "$PEERS_DIR/torch_ddp_fmnist.py" 600 "$who"
      ;;
    esac
    echo "strategies.sh: round $r: $(tail -n1 "$TMP/mwm_results.txt" | cut -c1-160)" >&2
  done
done
"$PYTHON" - "$TMP/mwm_results.txt" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(git -C "$REPO" rev-parse --short HEAD)" \
  > "$TMP/mwm.md" <<'PY'
import json, statistics, sys
rows = {"weft": [], "weft1": [], "weft16": [], "ddp": [], "ddpm": []}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    rows[who].append(json.loads(js))
def sps(r): return r.get("samples_per_second", r.get("samples_per_s", 0.0))
w = [sps(r) for r in rows["weft"]]; w1 = [sps(r) for r in rows["weft1"]]; w16 = [sps(r) for r in rows["weft16"]]
d0 = [sps(r) for r in rows["ddp"]]; dm = [sps(r) for r in rows["ddpm"]]
# The goal's peer: the faster of DDP as it comes and DDP with glibc tuned.
peer = "ddpm" if statistics.median(dm) > statistics.median(d0) else "ddp"
d = dm if peer == "ddpm" else d0
wa = [r["test_accuracy"] for r in rows["weft"]]; da = [r["test_accuracy"] for r in rows[peer]]
ratio = statistics.median(w) / statistics.median(d)
print("## MULTI_WORKER_MIRRORED against PyTorch DDP (issues 4 and 21)")
print()
print("The MLP 784-256-128-10 on Fashion-MNIST, 2 worker processes, batch 64 per worker")
print("(global 128), SGD at 0.1, one epoch, then the test set. weft: `weft local --workers=2`")
print("with `strategy { kind: MULTI_WORKER_MIRRORED }` (the defaults: each dispatch sized to about 20 ms")
print("of steps, two dispatches in flight; each worker reads its shard, gradients")
print("all-reduced through shared-memory rings between the two worker processes); PyTorch:")
print("`torch_ddp_fmnist.py --workers 2 --batch 64`")
print("(DistributedDataParallel, gloo), as it comes and with `MALLOC_MMAP_THRESHOLD_=2000000000")
print("MALLOC_TRIM_THRESHOLD_=4000000000` (glibc keeps PyTorch's per-step tensors in its heap instead")
print("of fresh mmap()s faulted in page by page, dear on this VM; weft's caching allocator needs no such")
print("help). The ratios are against the faster of the two. samples/s over the training steps after")
print("weft's first call of steps (its `warmup_seconds`: partitions registered, each worker's shard")
print("loaded, variables initialised; DDP's clock starts after the same setup), median of the rounds.")
print()
print("| | median samples/s | min | max | test accuracy (median) |")
print("|---|---:|---:|---:|---:|")
print(f"| weft MULTI_WORKER_MIRRORED | {statistics.median(w):,.0f} | {min(w):,.0f} | {max(w):,.0f} | {statistics.median(wa):.4f} |")
print(f"| weft MULTI_WORKER_MIRRORED, one step per dispatch, none in flight behind it | {statistics.median(w1):,.0f} | {min(w1):,.0f} | {max(w1):,.0f} | {statistics.median([r['test_accuracy'] for r in rows['weft1']]):.4f} |")
print(f"| weft MULTI_WORKER_MIRRORED, gradients all-reduced as float16 | {statistics.median(w16):,.0f} | {min(w16):,.0f} | {max(w16):,.0f} | {statistics.median([r['test_accuracy'] for r in rows['weft16']]):.4f} |")
print(f"| PyTorch DDP (gloo) | {statistics.median(d0):,.0f} | {min(d0):,.0f} | {max(d0):,.0f} | {statistics.median(r['test_accuracy'] for r in rows['ddp']):.4f} |")
print(f"| PyTorch DDP (gloo), glibc's mmap threshold raised | {statistics.median(dm):,.0f} | {min(dm):,.0f} | {max(dm):,.0f} | {statistics.median(r['test_accuracy'] for r in rows['ddpm']):.4f} |")
print(f"| **ratio weft / PyTorch (the faster DDP)** | **{ratio:.2f}** | | | |")
print(f"| ratio weft (one step per dispatch) / PyTorch | {statistics.median(w1) / statistics.median(d):.2f} | | | |")
print(f"| ratio weft (float16 all-reduce) / PyTorch | {statistics.median(w16) / statistics.median(d):.2f} | | | |")
print()
diff = (statistics.median(wa) - statistics.median(da)) * 100
gap = abs(diff)
print(f"Goal: at least 2.0x PyTorch's samples/s ({'met' if ratio >= 2 else '**not met**'}: {ratio:.2f}), "
      f"accuracy within 0.5 points after the same epochs ({'met' if gap <= 0.5 else '**not met**'}: "
      f"{gap:.2f} points, weft {'higher' if diff > 0 else 'lower'}; the two differ in initialisation and shuffling).")
print()
print(f"{len(w)} rounds; load average {sys.argv[2]} before and {sys.argv[3]} after; weft at {sys.argv[4]}.")
PY
echo >> "$TMP/mwm.md"
echo "![training samples/s](bench/plots/mwm_ddp.png)" >> "$TMP/mwm.md"
"$PYTHON" "$BENCH/bench_md.py" "$OUT" mwm-ddp --after allreduce < "$TMP/mwm.md"
echo "strategies: $(grep 'ratio weft' "$TMP/mwm.md") -> ${OUT#"$REPO"/}"
fi
# 3. MULTI_WORKER_MIRRORED against DDP with the convolutional example.
if part cnn; then
sed -e 's/^batch_size: .*/batch_size: 128/' -e 's/^epochs: .*/epochs: 1/' "$REPO/examples/fmnist_cnn.pbtxt" \
  > "$TMP/cnn.pbtxt"
printf 'intra_op_threads: 1\nstrategy { kind: MULTI_WORKER_MIRRORED }\n' >> "$TMP/cnn.pbtxt"
: > "$TMP/cnn_results.txt"
LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < ROUNDS; r++)); do
  for k in 0 1 2; do
    if (((k + r) % 3 == 0)); then
      line="$(env "${ENV[@]}" timeout 900 "$TMP/weft" local --workers=2 "$TMP/cnn.pbtxt" --output=json \
        2> "$TMP/weft_cnn.err" | grep '^{' | tail -n1)" || { tail -n 20 "$TMP/weft_cnn.err" >&2; die "weft local (CNN) failed"; }
      echo "weft $line" >> "$TMP/cnn_results.txt"
    else
      who=ddp; if (((k + r) % 3 == 2)); then who=ddpm; fi
      ddp_run "$TMP/cnn_results.txt" "$BENCH/torch_ddp_cnn.py" 900 "$who"
    fi
    echo "strategies.sh: CNN round $r: $(tail -n1 "$TMP/cnn_results.txt" | cut -c1-160)" >&2
  done
done
"$PYTHON" - "$TMP/cnn_results.txt" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(git -C "$REPO" rev-parse --short HEAD)" \
  > "$TMP/cnn.md" <<'PY'
import json, statistics, sys
rows = {"weft": [], "ddp": [], "ddpm": []}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    rows[who].append(json.loads(js))
def sps(r): return r.get("samples_per_second", r.get("samples_per_s", 0.0))
runs = {k: [sps(r) for r in v] for k, v in rows.items()}
acc = {k: statistics.median(r["test_accuracy"] for r in v) for k, v in rows.items()}
w = runs["weft"]
d = max(runs["ddp"], runs["ddpm"], key=statistics.median)  # the faster DDP
ratio = statistics.median(w) / statistics.median(d)
print("## MULTI_WORKER_MIRRORED against PyTorch DDP, convolutional network (issue 21)")
print()
print("examples/fmnist_cnn.pbtxt's network (3x3 convolutions of 16 and 32 filters, SAME, ReLU, each")
print("with a 2x2 max-pool; dense 128 and 10), Adam at 1e-3, 2 worker processes, batch 64 per worker,")
print("one epoch, then the test set. weft: `weft local --workers=2` with MULTI_WORKER_MIRRORED;")
print("PyTorch: `bench/torch_ddp_cnn.py --workers 2 --batch 64` (the same network under")
print("DistributedDataParallel, gloo), as it comes and with glibc's mmap threshold raised as in the")
print("MLP table. One thread per worker on both sides. samples/s over the training steps after")
print("weft's first call, as in the MLP table, median of the rounds.")
print()
print("| | median samples/s | min | max | test accuracy (median) |")
print("|---|---:|---:|---:|---:|")
print(f"| weft MULTI_WORKER_MIRRORED | {statistics.median(w):,.0f} | {min(w):,.0f} | {max(w):,.0f} | {acc['weft']:.4f} |")
for k, name in (("ddp", "PyTorch DDP (gloo)"), ("ddpm", "PyTorch DDP (gloo), glibc's mmap threshold raised")):
    v = runs[k]
    print(f"| {name} | {statistics.median(v):,.0f} | {min(v):,.0f} | {max(v):,.0f} | {acc[k]:.4f} |")
print(f"| **ratio weft / PyTorch (the faster DDP)** | **{ratio:.2f}** | | | |")
print()
print(f"Goal: at least 2.0x PyTorch's samples/s ({'met' if ratio >= 2 else '**not met**'}: {ratio:.2f}).")
print()
print(f"{len(w)} rounds, alternating which goes first; load average {sys.argv[2]} before and {sys.argv[3]} after; "
      f"weft at {sys.argv[4]}. Command: `STRATEGIES_PARTS=cnn bench/strategies.sh`.")
PY
"$PYTHON" "$BENCH/bench_md.py" "$OUT" mwm-cnn-ddp --after mwm-ddp < "$TMP/cnn.md"
echo "strategies: $(grep 'ratio weft' "$TMP/cnn.md") -> ${OUT#"$REPO"/}"
fi
mkdir -p "$BENCH/plots"
"$PYTHON" "$BENCH/plot_strategies.py" "$TMP/allreduce.txt" "$TMP/mwm_results.txt" "$BENCH/plots"
