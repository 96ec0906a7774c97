#!/usr/bin/env bash
# The model benchmarks on CPU (issue 22), called by bench/run.sh; writes the
# "resnet-cpu" section of BENCHMARKS.md.
#
#   1. Speed: examples/fmnist_resnet.pbtxt for one epoch against the same
#      network in PyTorch (bench/torch_ddp_cnn.py --model resnet), batch 64,
#      one thread per process: one process each (`weft train` against plain
#      PyTorch), and 2 workers each (`weft local --workers=2` with
#      MULTI_WORKER_MIRRORED against DDP over gloo). BENCH_ROUNDS rounds,
#      alternating which goes first; samples/s over the training steps after
#      the first call (weft) or after setup (PyTorch).
#   2. Accuracy: the example in full (its epochs, one process), whose test
#      accuracy the issue wants at 0.92 or more.
#
# Environment: as bench/run.sh (PYTHON, BENCH_OUT, BENCH_ROUNDS, WEFT), and
# MODELS_PARTS: the parts to run, default "speed accuracy".
set -euo pipefail

BENCH_NAME=models.sh
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PARTS="${MODELS_PARTS:-speed accuracy}"
"$REPO/tools/install_deps.sh" python3-torch libopenblas0-pthread

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ENV=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1)
TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-models.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
cp "$WEFT_BIN" "$TMP/weft"
RESULTS="$TMP/results.txt"
: > "$RESULTS"

# weft_run WHO ARGS...: one weft run, its JSON appended to RESULTS as "WHO <json>".
weft_run() {
  local who="$1" line
  shift
  line="$(env "${ENV[@]}" timeout 3600 "$TMP/weft" "$@" --output=json 2> "$TMP/weft.err" | grep '^{' | tail -n1)" ||
    { tail -n 20 "$TMP/weft.err" >&2; die "weft $1 failed"; }
  echo "$who $line" >> "$RESULTS"
}

# torch_run WHO WORKERS: one run of the PyTorch ResNet, appended likewise.
torch_run() {
  local line
  line="$(env "${ENV[@]}" timeout 3600 "$PYTHON" "$BENCH/torch_ddp_cnn.py" --model resnet --workers "$2" --batch 64 \
    --epochs 1 --threads 1 --port "$(free_port)" 2> "$TMP/torch.err" | grep '^{' | tail -n1)" ||
    { tail -n 20 "$TMP/torch.err" >&2; die "the PyTorch ResNet failed"; }
  echo "$1 $line" >> "$RESULTS"
}

LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
if part speed; then
  sed -e 's/^epochs: .*/epochs: 1/' "$REPO/examples/fmnist_resnet.pbtxt" > "$TMP/one.pbtxt"
  echo 'intra_op_threads: 1' >> "$TMP/one.pbtxt"
  # Two workers of 64 each: the global batch is 128.
  sed -e 's/^batch_size: .*/batch_size: 128/' "$TMP/one.pbtxt" > "$TMP/mwm.pbtxt"
  echo 'strategy { kind: MULTI_WORKER_MIRRORED }' >> "$TMP/mwm.pbtxt"
  for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then
      weft_run weft1 train "$TMP/one.pbtxt"; torch_run torch1 1
      weft_run weft2 local --workers=2 "$TMP/mwm.pbtxt"; torch_run torch2 2
    else
      torch_run torch1 1; weft_run weft1 train "$TMP/one.pbtxt"
      torch_run torch2 2; weft_run weft2 local --workers=2 "$TMP/mwm.pbtxt"
    fi
    echo "models.sh: round $r done: $(tail -n4 "$RESULTS" | cut -c1-100 | tr '\n' ' ')" >&2
  done
fi
if part accuracy; then
  sed -e '$a intra_op_threads: 2' "$REPO/examples/fmnist_resnet.pbtxt" > "$TMP/full.pbtxt"
  weft_run full train "$TMP/full.pbtxt"
fi

"$PYTHON" - "$RESULTS" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(git -C "$REPO" rev-parse --short HEAD)" \
  > "$TMP/section.md" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    rows.setdefault(who, []).append(json.loads(js))
def sps(r): return r.get("samples_per_second", r.get("samples_per_s", 0.0))
print("## ResNet on CPU against PyTorch (issue 22)")
print()
print("examples/fmnist_resnet.pbtxt: a batch-normalised 3x3 stem of 32 filters and a 2x2 max-pool, a residual")
print("block of 32 channels at 14x14, a strided block of 64 at 7x7 with a 1x1 projection shortcut, global")
print("average pooling, dense 10; batch 64 per process, one thread per process; weft with the example's")
print("AdamW, warm-up and cosine. PyTorch: `bench/torch_ddp_cnn.py --model resnet` (the same network, Adam at")
print("1e-3; one process, or DistributedDataParallel over gloo). samples/s over the training steps after")
print("weft's first call and after PyTorch's setup.")
print()
if "weft1" in rows:
    print("| one epoch | weft median samples/s | min | max | PyTorch median | min | max | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for w, t, name in (("weft1", "torch1", "one process"), ("weft2", "torch2", "2 workers (MULTI_WORKER_MIRRORED / DDP)")):
        a, b = [sps(r) for r in rows[w]], [sps(r) for r in rows[t]]
        print(f"| {name} | {statistics.median(a):,.0f} | {min(a):,.0f} | {max(a):,.0f} | "
              f"{statistics.median(b):,.0f} | {min(b):,.0f} | {max(b):,.0f} | "
              f"**{statistics.median(a) / statistics.median(b):.2f}** |")
    acc = {k: statistics.median(r["test_accuracy"] for r in v) for k, v in rows.items() if k != "full"}
    print()
    print("Test accuracy after the one epoch (median): " +
          ", ".join(f"{k} {v:.4f}" for k, v in sorted(acc.items())) + ".")
    print()
if "full" in rows:
    f = rows["full"][0]
    goal = "met" if f["test_accuracy"] >= 0.92 else "**not met**"
    print(f"The example in full (`weft train examples/fmnist_resnet.pbtxt`, {f['epochs']} epochs, 2 threads): "
          f"test accuracy **{f['test_accuracy']:.4f}** (goal 0.92, {goal}), {f['wall_seconds']:.0f} s, "
          f"{sps(f):,.0f} samples/s.")
    print()
print(f"{len(rows.get('weft1', []))} rounds, alternating which goes first; load average {sys.argv[2]} before and "
      f"{sys.argv[3]} after; weft at {sys.argv[4]}. Command: `bench/models.sh`.")
PY
"$PYTHON" "$BENCH/bench_md.py" "$OUT" resnet-cpu --after mwm-cnn-ddp < "$TMP/section.md"
echo "models: $(grep -c '' "$TMP/section.md") lines -> ${OUT#"$REPO"/}"
