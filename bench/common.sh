# The settings the benchmark scripts of `make bench` share, sourced by each
# after it sets BENCH_NAME (its name in error messages):
#   REPO, BENCH, PYTHON, OUT (BENCH_OUT), ROUNDS (BENCH_ROUNDS, default 3),
#   WEFT_BIN (WEFT), die MESSAGE, part NAME (whether $PARTS lists NAME);
# and it stops the script when there is no weft binary to measure.
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH="$REPO/bench"
PYTHON="${PYTHON:-/usr/bin/python3}"
OUT="${BENCH_OUT:-$REPO/BENCHMARKS.md}"
ROUNDS="${BENCH_ROUNDS:-3}"
WEFT_BIN="${WEFT:-$REPO/bazel-bin/client/weft}"
die() { echo "${BENCH_NAME:-bench}: $*" >&2; exit 1; }
part() { [[ " $PARTS " == *" $1 "* ]]; }
# mlp_job NAME BATCH EPOCHS [DATASET_FIELDS]: the benchmarks' MLP job on
# stdout: 784-256-128-10 on Fashion-MNIST from $DATA_DIR (DATASET_FIELDS, e.g.
# "train_limit: 12800", added to its dataset), SGD at 0.1, one thread per
# process; a caller appends its seed, strategy and the rest.
mlp_job() {
  cat <<JOB
name: "$1"
model {
  input_shape: [784]
  num_classes: 10
  layer { dense { units: 256 activation: RELU } }
  layer { dense { units: 128 activation: RELU } }
  layer { dense { units: 10 } }
}
dataset { format: IDX dir: "${DATA_DIR:?}" scale: 255${4:+ $4} }
optimizer { sgd { learning_rate: 0.1 } }
batch_size: $2
epochs: $3
intra_op_threads: 1
JOB
}
[ -x "$WEFT_BIN" ] || die "no weft binary at $WEFT_BIN: run 'make bench', or set WEFT"
