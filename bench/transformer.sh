#!/usr/bin/env bash
# The transformer benchmarks on CPU (issue 22), called by bench/run.sh;
# writes the "transformer-cpu" section of BENCHMARKS.md.
#
#   1. Speed: examples/kjv_transformer.pbtxt for TRANSFORMER_STEPS steps
#      against the same model in PyTorch (bench/torch_transformer.py), batch
#      32 per process, one thread per process: one process each (`weft
#      train` against plain PyTorch), and 2 workers each (`weft local
#      --workers=2` with MULTI_WORKER_MIRRORED against DDP over gloo).
#      BENCH_ROUNDS rounds, alternating which goes first.
#   2. Learning: the example in full (one epoch of the corpus, one
#      process) on both sides; validation loss per byte, in nats.
#
# Environment: as bench/run.sh (PYTHON, BENCH_OUT, BENCH_ROUNDS, WEFT), and
# TRANSFORMER_PARTS: the parts to run, default "speed full";
# TRANSFORMER_STEPS: the speed runs' steps, default 150.
set -euo pipefail

BENCH_NAME=transformer.sh
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PARTS="${TRANSFORMER_PARTS:-speed full}"
STEPS="${TRANSFORMER_STEPS:-150}"
"$REPO/tools/install_deps.sh" python3-torch libopenblas0-pthread bible-kjv

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ENV=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1)
TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-transformer.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
cp "$WEFT_BIN" "$TMP/weft"
"$REPO/tools/kjv_corpus.sh" "$TMP/data/kjv.txt"
RESULTS="$TMP/results.txt"
: > "$RESULTS"

# job OUT EDITS...: the example with its corpus in $TMP/data, one thread, and `sed` edits.
job() {
  local out="$1"
  shift
  sed -e "s|^  dir: .*|  dir: \"$TMP/data\"|" "$@" "$REPO/examples/kjv_transformer.pbtxt" > "$out"
  echo 'intra_op_threads: 1' >> "$out"
}

weft_run() {
  local who="$1" line
  shift
  line="$(env "${ENV[@]}" timeout 7200 "$TMP/weft" "$@" --output=json 2> "$TMP/weft.err" | grep '^{' | tail -n1)" ||
    { tail -n 20 "$TMP/weft.err" >&2; die "weft $1 failed"; }
  echo "$who $line" >> "$RESULTS"
}

# torch_run WHO WORKERS ARGS...
torch_run() {
  local who="$1" workers="$2" line
  shift 2
  line="$(cd "$BENCH" && env "${ENV[@]}" timeout 7200 "$PYTHON" torch_transformer.py --corpus "$TMP/data/kjv.txt" \
    --workers "$workers" --threads 1 --port "$(free_port)" "$@" 2> "$TMP/torch.err" | grep '^{' | tail -n1)" ||
    { tail -n 20 "$TMP/torch.err" >&2; die "the PyTorch transformer failed"; }
  echo "$who $line" >> "$RESULTS"
}

LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
if part speed; then
  # STEPS steps of batch 32 per process: as many sequences as the data limit
  # holds (2 workers: twice as many, batch 64 in all).
  warm=$((STEPS / 10))
  edits=(-e "s/warmup_steps: [0-9]*/warmup_steps: $warm/" -e "s/decay_steps: [0-9]*/decay_steps: $((STEPS - warm))/"
         -e "s/^  text {/  train_limit: $((STEPS * 32))\n  test_limit: 256\n  text {/")
  job "$TMP/one.pbtxt" "${edits[@]}"
  job "$TMP/mwm.pbtxt" "${edits[@]}" -e "s/train_limit: [0-9]*/train_limit: $((STEPS * 64))/" \
    -e 's/^batch_size: .*/batch_size: 64/'
  echo 'strategy { kind: MULTI_WORKER_MIRRORED }' >> "$TMP/mwm.pbtxt"
  args=(--warmup "$warm" --test_limit 256)
  for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then
      weft_run weft1 train "$TMP/one.pbtxt"; torch_run torch1 1 "${args[@]}" --train_limit $((STEPS * 32))
      weft_run weft2 local --workers=2 --data_root="$TMP/data" "$TMP/mwm.pbtxt"; torch_run torch2 2 "${args[@]}" --train_limit $((STEPS * 64))
    else
      torch_run torch1 1 "${args[@]}" --train_limit $((STEPS * 32)); weft_run weft1 train "$TMP/one.pbtxt"
      torch_run torch2 2 "${args[@]}" --train_limit $((STEPS * 64)); weft_run weft2 local --workers=2 --data_root="$TMP/data" "$TMP/mwm.pbtxt"
    fi
    echo "transformer.sh: round $r done: $(tail -n4 "$RESULTS" | cut -c1-100 | tr '\n' ' ')" >&2
  done
fi
if part full; then
  job "$TMP/full.pbtxt"
  weft_run wfull train "$TMP/full.pbtxt"
  torch_run tfull 1 --warmup 100
fi

"$PYTHON" - "$RESULTS" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(git -C "$REPO" rev-parse --short HEAD)" \
  "$STEPS" > "$TMP/section.md" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    rows.setdefault(who, []).append(json.loads(js))
def sps(r): return r.get("samples_per_second", r.get("samples_per_s", 0.0))
def loss(r): return r.get("test_loss", r.get("val_loss"))
print("## Character-level transformer on CPU against PyTorch (issue 22)")
print()
print("examples/kjv_transformer.pbtxt: byte embeddings and learned positions (128 bytes, width 128), two")
print("pre-norm blocks of 4-head causal self-attention and a 512-wide ReLU feed-forward, a final layer norm,")
print("dense logits over 256 bytes; AdamW with warm-up and cosine, gradients clipped to norm 1; batch 32 per")
print("process, one thread per process. The corpus is the King James Bible (Debian's bible-kjv, 4.3 MB), its")
print("last 10% the validation split. PyTorch: `bench/torch_transformer.py` (the same model, data and")
print("schedule; one process, or DistributedDataParallel over gloo). samples/s are sequences of 128 bytes.")
print()
if "weft1" in rows:
    print(f"| {sys.argv[5]} steps | weft median samples/s | min | max | PyTorch median | min | max | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for w, t, name in (("weft1", "torch1", "one process"), ("weft2", "torch2", "2 workers (MULTI_WORKER_MIRRORED / DDP)")):
        a, b = [sps(r) for r in rows[w]], [sps(r) for r in rows[t]]
        print(f"| {name} | {statistics.median(a):,.0f} | {min(a):,.0f} | {max(a):,.0f} | "
              f"{statistics.median(b):,.0f} | {min(b):,.0f} | {max(b):,.0f} | "
              f"**{statistics.median(a) / statistics.median(b):.2f}** |")
    vl = {k: statistics.median(loss(r) for r in v) for k, v in rows.items() if k in ("weft1", "torch1", "weft2", "torch2")}
    print()
    print("Validation loss after those steps (median, nats per byte, first 256 validation sequences): " +
          ", ".join(f"{k} {v:.3f}" for k, v in sorted(vl.items())) + ".")
    print()
if "wfull" in rows and "tfull" in rows:
    w, t = rows["wfull"][0], rows["tfull"][0]
    print(f"The example in full (one epoch, {w['steps']} steps, one process): validation loss **{loss(w):.3f}** "
          f"nats per byte for weft ({w['wall_seconds']:.0f} s, {sps(w):,.0f} samples/s) against **{loss(t):.3f}** "
          f"for PyTorch ({t['seconds']:.0f} s of training, {sps(t):,.0f} samples/s). The corpus's unigram entropy "
          f"is 3.07.")
    print()
print(f"{len(rows.get('weft1', []))} rounds, alternating which goes first; load average {sys.argv[2]} before and "
      f"{sys.argv[3]} after; weft at {sys.argv[4]}. Command: `bench/transformer.sh`.")
PY
"$PYTHON" "$BENCH/bench_md.py" "$OUT" transformer-cpu --after resnet-cpu < "$TMP/section.md"
echo "transformer: $(grep -c '' "$TMP/section.md") lines -> ${OUT#"$REPO"/}"
