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
[ -x "$WEFT_BIN" ] || die "no weft binary at $WEFT_BIN: run 'make bench', or set WEFT"
