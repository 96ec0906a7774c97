#!/usr/bin/env bash
# The seed's LSTM regression on CPU (issue 22), called by bench/run.sh;
# writes the "lstm-regression-cpu" section of BENCHMARKS.md.
#
# examples/seattle_weather_lstm.pbtxt in full, BENCH_ROUNDS rounds
# alternating which goes first: `weft train` (one thread), `weft local
# --workers=2` under MULTI_WORKER_MIRRORED (one thread a worker), and the
# same model, data and optimizer in PyTorch (bench/torch_series.py, one
# thread). Test loss (mean squared error of the standardised temperature)
# against the baselines, samples/s over the training steps after weft's
# first call and PyTorch's setup.
#
# Environment: as bench/run.sh (PYTHON, BENCH_OUT, BENCH_ROUNDS, WEFT).
set -euo pipefail

BENCH_NAME=regression.sh
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
DATA=/usr/lib/python3/dist-packages/vega_datasets/_data
"$REPO/tools/install_deps.sh" python3-torch libopenblas0-pthread
"$REPO/tools/install_deps.sh" --no-install-recommends python3-vega-datasets
[ -r "$DATA/seattle-weather.csv" ] || die "no $DATA/seattle-weather.csv (python3-vega-datasets)"

ENV=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1)
TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-regression.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
RESULTS="$TMP/results.txt"
: > "$RESULTS"
sed -e '$a intra_op_threads: 1' "$REPO/examples/seattle_weather_lstm.pbtxt" > "$TMP/one.pbtxt"
sed -e '$a strategy { kind: MULTI_WORKER_MIRRORED }' "$TMP/one.pbtxt" > "$TMP/mwm.pbtxt"

# run WHO COMMAND...: one run, its JSON line appended to RESULTS as "WHO <json>".
run() {
  local who="$1" line
  shift
  line="$(env "${ENV[@]}" timeout 1800 "$@" 2> "$TMP/err" | grep '^{' | tail -n1)" ||
    { tail -n 20 "$TMP/err" >&2; die "$who failed"; }
  echo "$who $line" >> "$RESULTS"
}
weft1() { run weft1 "$WEFT_BIN" train "$TMP/one.pbtxt" --output=json; }
weft2() {
  mkdir -p "$TMP/local"
  run weft2 "$WEFT_BIN" local --workers=2 --data_root="$DATA" --log_dir="$TMP/local" \
    --checkpoint_root="$TMP/local/ckpt" "$TMP/mwm.pbtxt" --output=json
  rm -rf "$TMP/local"
}
torch1() { run torch1 "$PYTHON" "$BENCH/torch_series.py" --csv "$DATA/seattle-weather.csv" --threads 1; }

LOAD0="$(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2 == 0)); then weft1; weft2; torch1; else torch1; weft1; weft2; fi
  echo "regression.sh: round $r done" >&2
done

"$PYTHON" - "$RESULTS" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(git -C "$REPO" rev-parse --short HEAD)" \
  > "$TMP/section.md" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    rows.setdefault(who, []).append(json.loads(js))
med = lambda who, key: statistics.median(r[key] for r in rows[who])
def span(who, key, fmt):
    return f"{min(r[key] for r in rows[who]):{fmt}} to {max(r[key] for r in rows[who]):{fmt}}"
t = rows["torch1"][0]
print("## The seed's LSTM regression on CPU (issue 22)")
print()
print("examples/seattle_weather_lstm.pbtxt in full: tomorrow's highest temperature in Seattle from the 30")
print("days before it (Debian's python3-vega-datasets, 2012-2015; the last 10% of the days for test,")
print("standardised with the train split's mean and deviation), an LSTM of 32 units and a dense output,")
print("mean squared error, Adam at 0.005 clipped at a global norm of 5, batch 32, 30 epochs, one thread per")
print("process. PyTorch: `bench/torch_series.py`, the same data, model and optimizer (`nn.LSTM`).")
print()
print("| run | test loss (MSE) median | range | samples/s median | range |")
print("|---|---:|---|---:|---|")
for who, name in (("weft1", "weft, one process"), ("weft2", "weft, MULTI_WORKER_MIRRORED, 2 workers"),
                  ("torch1", "PyTorch, one process")):
    print(f"| {name} | {med(who, 'test_loss'):.4f} | {span(who, 'test_loss', '.4f')} | "
          f"{med(who, 'samples_per_second'):,.0f} | {span(who, 'samples_per_second', ',.0f')} |")
print()
print(f"Baselines on the same {t['test_examples']} test windows: repeating the window's last value "
      f"{t['persistence_test_loss']:.4f}, the least-squares linear fit of the window {t['linear_test_loss']:.4f}. "
      f"weft / PyTorch samples/s, one process: **{med('weft1', 'samples_per_second') / med('torch1', 'samples_per_second'):.2f}x**.")
print()
print(f"{len(rows['weft1'])} rounds, alternating which goes first; load average {sys.argv[2]} before and "
      f"{sys.argv[3]} after; weft at {sys.argv[4]}. Command: `bench/regression.sh`.")
PY
"$PYTHON" "$BENCH/bench_md.py" "$OUT" lstm-regression-cpu --after resnet-cpu < "$TMP/section.md"
echo "regression: $(grep -c '' "$TMP/section.md") lines -> ${OUT#"$REPO"/}"
