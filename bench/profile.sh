#!/usr/bin/env bash
# Profiles weft's single-process training step (the MLP of bench/run.sh) and
# rewrites the "Profile" block of BENCHMARKS.md. Run by hand, not by
# `make bench`: it needs valgrind (and perf, optionally), and takes about ten
# minutes, because valgrind emulates each AVX2 FMA of the GEMMs slowly.
#
#   bench/profile.sh          # after `bazel build //client:weft`
#
# Environment: PROFILE_STEPS (default 200) steps under callgrind;
# PROFILE_KEEP=DIR keeps callgrind.out and the listings there; WEFT, PYTHON,
# BENCH_OUT as for bench/run.sh.
set -euo pipefail

BENCH_NAME=profile
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
STEPS="${PROFILE_STEPS:-200}"
DATA_DIR=/usr/share/datasets/fashion-mnist

[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "PROFILE_STEPS must be a positive integer, got '$STEPS'"
if ! command -v valgrind > /dev/null || ! command -v callgrind_annotate > /dev/null; then
  die "needs valgrind and callgrind_annotate: apt-get install valgrind"
fi
[ -f "$DATA_DIR/train-images-idx3-ubyte.gz" ] || die "no Fashion-MNIST in $DATA_DIR: install dataset-fashion-mnist"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/weft-profile.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
cp "$WEFT_BIN" "$TMP/weft"

# bench/run.sh's job, cut to a few steps over the first 12,800 images.
job() {  # job STEPS (steps win over mlp_job's epochs)
  mlp_job profile-mlp 64 1 'train_limit: 12800'
  printf 'steps: %s\nseed: 1\neval { skip: true }\n' "$1"
}
job "$STEPS" > "$TMP/profile_mlp.pbtxt"

# Collect only inside the training loop and the prefetch thread.
CG_CMD="valgrind --tool=callgrind --toggle-collect='weft::LocalTrainer::Train(*' --toggle-collect='weft::data::BatchIterator::PrefetchLoop(*' weft train profile_mlp.pbtxt  # steps: $STEPS, train_limit: 12800, eval { skip: true }"
echo "profile: callgrind over $STEPS steps (about 2.5 s a step)..." >&2
(cd "$TMP" && valgrind --tool=callgrind --callgrind-out-file=callgrind.out \
  '--toggle-collect=weft::LocalTrainer::Train(*' '--toggle-collect=weft::data::BatchIterator::PrefetchLoop(*' \
  ./weft train profile_mlp.pbtxt --output=json > train.json 2> callgrind.log) ||
  { tail -n 20 "$TMP/callgrind.log" >&2; die "weft failed under callgrind"; }
callgrind_annotate "$TMP/callgrind.out" > "$TMP/self.txt"
callgrind_annotate --inclusive=yes --threshold=100 "$TMP/callgrind.out" > "$TMP/inclusive.txt"
callgrind_annotate --tree=caller "$TMP/callgrind.out" > "$TMP/callers.txt"

# perf, where it can sample (cpu-clock needs no hardware counters): a longer
# native run, recording after the first 3 s to skip loading.
PERF_ARGS=()
PERF_CMD="perf record -F 4000 -D 3000 weft train (the job above with steps: 8000); perf report --no-children --sort dso,sym"
if command -v perf > /dev/null && perf record -e cpu-clock -o "$TMP/probe.data" true > /dev/null 2>&1; then
  echo "profile: perf over 8000 native steps..." >&2
  job 8000 > "$TMP/perf_mlp.pbtxt"
  if perf record -e cpu-clock -F 4000 -D 3000 -o "$TMP/perf.data" "$TMP/weft" train "$TMP/perf_mlp.pbtxt" \
      --output=json > /dev/null 2> "$TMP/perf.log"; then
    perf report -i "$TMP/perf.data" --stdio --no-children --sort dso,sym > "$TMP/perf.txt" 2> /dev/null
    PERF_ARGS=(--perf "$TMP/perf.txt" --perf-command "$PERF_CMD")
  else
    echo "profile: perf record failed; leaving perf out:" >&2
    tail -n 5 "$TMP/perf.log" >&2
  fi
else
  echo "profile: perf cannot sample here; leaving it out" >&2
fi

"$PYTHON" "$BENCH/profile_summary.py" --self "$TMP/self.txt" --inclusive "$TMP/inclusive.txt" \
  --callers "$TMP/callers.txt" --steps "$STEPS" --command "$CG_CMD" "${PERF_ARGS[@]}" > "$TMP/profile.md"
"$PYTHON" "$BENCH/bench_md.py" "$OUT" mlp-single-profile --after mlp-single < "$TMP/profile.md"
if [ -n "${PROFILE_KEEP:-}" ]; then
  mkdir -p "$PROFILE_KEEP"
  cp "$TMP"/callgrind.out "$TMP"/self.txt "$TMP"/inclusive.txt "$TMP"/callers.txt "$PROFILE_KEEP"/
  [ -f "$TMP/perf.txt" ] && cp "$TMP/perf.txt" "$PROFILE_KEEP"/
fi
echo "profile: wrote the Profile block of ${OUT#"$REPO"/}" >&2
