#!/usr/bin/env bash
# The side-by-side benchmarks behind `make bench`, which builds //client:weft
# and installs the peers' Debian packages before calling this.
#
# Single-process MLP training (issue 2): weft and the PyTorch peer
# (shared/peers/torch_ddp_fmnist.py, one worker) train the same MLP
# 784-256-128-10 on Fashion-MNIST for one epoch (batch 64, SGD lr 0.1, one
# thread each), alternately, BENCH_ROUNDS times; the medians and their ratio
# go into BENCHMARKS.md and a one-line summary to stdout.
#
# Environment:
#   BENCH_ROUNDS   rounds of (weft, PyTorch); default 3
#   PEERS_DIR      the peers' directory; default <repo>/../shared/peers
#   WEFT           the weft binary; default <repo>/bazel-bin/client/weft
#   PYTHON         the peer's interpreter; default /usr/bin/python3 (Debian's)
#   BENCH_OUT      the file to write; default <repo>/BENCHMARKS.md
set -euo pipefail

BENCH_NAME=bench
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PEERS_DIR="${PEERS_DIR:-$REPO/../shared/peers}"
DATA_DIR=/usr/share/datasets/fashion-mnist  # the peer reads it from here too
RUN_TIMEOUT=300                             # seconds per training run

[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a positive integer, got '$ROUNDS'"
PEER="$PEERS_DIR/torch_ddp_fmnist.py"
[ -f "$PEER" ] || die "no PyTorch peer at $PEER: check out shared/ beside the repository (CI does), or set PEERS_DIR"
[ -x "$PYTHON" ] || die "no Python at $PYTHON: install Debian's python3 (make bench does), or set PYTHON"
[ -f "$DATA_DIR/train-images-idx3-ubyte.gz" ] || die "no Fashion-MNIST in $DATA_DIR: install dataset-fashion-mnist"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-bench.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
# A private copy, so a concurrent `bazel build` cannot swap the binary mid-run.
cp "$WEFT_BIN" "$TMP/weft"

JOB="$TMP/mlp_bench.pbtxt"
{
  echo "# examples/fmnist_mlp.pbtxt's model, trained like the PyTorch peer trains it."
  mlp_job bench-mlp 64 1
  printf 'seed: 1\neval { skip: true }\n'
} > "$JOB"

# One thread of BLAS/OpenMP per process: the machine has few cores, and the
# peer's README asks for it. weft ignores these; they are set for symmetry.
THREAD_ENV=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1)

# A TCP port nobody listens on now; each peer run gets its own, so a port left
# in TIME_WAIT by the previous run cannot clash.
free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

RESULTS="$TMP/results.txt"  # lines: "<system> <json>"
: > "$RESULTS"
# The JSON line a run printed, or a failure with the run's log.
json_of() {  # json_of NAME STDOUT STDERR
  local line
  line="$(grep -m1 '^{' "$2" || true)"
  if [ -z "$line" ]; then
    echo "bench: $1 printed no JSON result; its output:" >&2
    tail -n 20 "$2" "$3" >&2
    exit 1
  fi
  printf '%s\n' "$line"
}

run_weft() {  # run_weft ROUND
  local o="$TMP/weft.$1.out" e="$TMP/weft.$1.err"
  if ! env "${THREAD_ENV[@]}" timeout "$RUN_TIMEOUT" "$TMP/weft" train "$JOB" --output=json > "$o" 2> "$e"; then
    echo "bench: weft failed in round $1:" >&2
    tail -n 20 "$o" "$e" >&2
    exit 1
  fi
  echo "weft $(json_of weft "$o" "$e")" >> "$RESULTS"
}

run_torch() {  # run_torch ROUND
  local o="$TMP/torch.$1.out" e="$TMP/torch.$1.err" port
  port="$(free_port)"
  # OPENBLAS_VERBOSE=2 makes OpenBLAS name the kernel it chose, which shows the
  # peer runs on OpenBLAS and not on the reference BLAS.
  if ! env "${THREAD_ENV[@]}" OPENBLAS_VERBOSE=2 timeout "$RUN_TIMEOUT" \
      "$PYTHON" "$PEER" --workers 1 --batch 64 --epochs 1 --threads 1 --port "$port" > "$o" 2> "$e"; then
    echo "bench: the PyTorch peer failed in round $1 (port $port):" >&2
    tail -n 20 "$o" "$e" >&2
    exit 1
  fi
  echo "torch $(json_of "the PyTorch peer" "$o" "$e")" >> "$RESULTS"
  grep -m1 -o 'Core: .*' "$e" > "$TMP/openblas_core" || true
}

LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "bench: single-process MLP training, $ROUNDS round(s) of weft and PyTorch" >&2
for ((r = 1; r <= ROUNDS; r++)); do
  # Alternate who goes first, so a slow spell of the machine hits both.
  if ((r % 2 == 1)); then run_weft "$r"; run_torch "$r"; else run_torch "$r"; run_weft "$r"; fi
  echo "bench: round $r/$ROUNDS done" >&2
done

FACTS="$TMP/facts.txt"
{
  echo "rounds=$ROUNDS"
  echo "load_start=$LOAD_START"
  echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "openblas_core=$(sed 's/^Core: //' "$TMP/openblas_core" 2>/dev/null || true)"
  echo "commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    [ -n "$(git -C "$REPO" status --porcelain 2>/dev/null)" ] && echo ' (with local changes)')"
} > "$FACTS"

"$PYTHON" "$BENCH/mlp_single.py" --results "$RESULTS" --facts "$FACTS" --job "$JOB" \
  --markdown "$TMP/section.md" > "$TMP/summary.txt"
"$PYTHON" "$BENCH/bench_md.py" "$OUT" mlp-single --before mlp-single-profile < "$TMP/section.md"
echo "$(cat "$TMP/summary.txt") -> ${OUT#"$REPO"/}"

# The distributed-runtime benchmarks (issue 3): RecvTensor and the no-op step.
"$BENCH/transfer.sh"

# What mutual TLS costs: RecvTensor and MULTI_WORKER_MIRRORED with and
# without certificates.
"$BENCH/tls_cost.sh"

# What being watched costs: the same MULTI_WORKER_MIRRORED job scraped once
# a second against no metrics port (the observability issue).
"$BENCH/metrics_cost.sh"

# The strategy benchmarks (issue 4): ring all-reduce against gloo and MPI,
# MULTI_WORKER_MIRRORED against PyTorch DDP.
"$BENCH/strategies.sh"

# The rest of issue 4: PARAMETER_SERVER against DDP, scaling with 1, 2 and 4
# workers, and accuracy after the same epochs over several seeds.
"$BENCH/ps_scaling.sh"

# Issue 23: one elastic job moved between 2 and 3 workers by `weft scale`,
# samples/s on each and the pause of each change.
"$BENCH/elastic.sh"
# What the elastic gates cost a job whose members do not change: the same
# jobs with and without `elastic`, MULTI_WORKER_MIRRORED and both PS modes.
"$BENCH/elastic_cost.sh"

# Issue 22's models on CPU: the ResNet example against the same network in
# PyTorch, one process and 2 workers, and its accuracy in full.
"$BENCH/models.sh"

# The seed's LSTM regression in full: one process, 2 workers, and PyTorch.
"$BENCH/regression.sh"

# Issue 22's transformer on CPU: the character-level language model against
# the same model in PyTorch, and one epoch of each.
"$BENCH/transformer.sh"
