#!/usr/bin/env bash
# Builds weft's libFuzzer targets (tests/fuzz/) with clang, ASan and UBSan,
# and fuzzes each for a while.
#
#   tools/fuzz.sh [--seconds N] [--jobs J] [--config C] [TARGET...]
#
#   --seconds N  how long to fuzz each target (default 180); CI smoke runs
#                use --seconds 5
#   --config C   the Bazel config to build with (default fuzz, at -O1;
#                `make sanitize` passes sanitize, its -O0 build)
#   --jobs J     parallel fuzzing processes per target (libFuzzer -jobs and
#                -workers; default 1)
#   TARGET       idx_reader_fuzzer or just idx_reader; default: every target
#
# The working corpus of target X lives in $WEFT_FUZZ_DIR/X (default
# ${TMPDIR:-/tmp}/weft-fuzz), outside the repository, seeded from
# tests/fuzz/corpus/X and kept between runs; reproducers go to
# $WEFT_FUZZ_DIR/crashes/X/. Prints one line per target (executions, exec/s,
# corpus size, cov, ft) and exits 1 when any target crashed, leaked or timed
# out, naming the reproducer. docs/fuzzing.md says how a finding becomes a
# regression test.
set -euo pipefail

cd "$(dirname "$0")/.."
# One clang output base per checkout (as Bazel keys its own by workspace
# path), shared with `make sanitize`.
readonly OUTPUT_BASE="${WEFT_SANITIZE_OUTPUT_BASE:-${HOME}/.cache/bazel/weft-sanitize-$(printf %s "$PWD" | md5sum | cut -c1-12)}"
readonly WORK="${WEFT_FUZZ_DIR:-${TMPDIR:-/tmp}/weft-fuzz}"

seconds=180
jobs=1
config=fuzz
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    --jobs=*) jobs="${1#*=}"; shift ;;
    --config) config="$2"; shift 2 ;;
    --config=*) config="${1#*=}"; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag $1" >&2; exit 2 ;;
    *) targets+=("${1%_fuzzer}_fuzzer"); shift ;;
  esac
done
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ && "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: --seconds and --jobs take positive integers" >&2
  exit 2
fi
if [[ ${#targets[@]} -eq 0 ]]; then
  for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
for t in "${targets[@]}"; do
  if [[ ! -f "tests/fuzz/${t}.cc" ]]; then
    echo "fuzz.sh: no fuzz target ${t} (tests/fuzz/${t}.cc)" >&2
    exit 2
  fi
done

# Own output base: clang's toolchain is detected when the server starts.
# --symlink_prefix=/ keeps the workspace's bazel-* links on the default build.
bazel_fuzz=(bazel "--output_base=${OUTPUT_BASE}")
labels=()
for t in "${targets[@]}"; do labels+=("//tests/fuzz:${t}"); done
"${bazel_fuzz[@]}" build "--config=${config}" --symlink_prefix=/ "${labels[@]}"
bin="$("${bazel_fuzz[@]}" info "--config=${config}" bazel-bin 2>/dev/null)"

# The last value of `key: N` in libFuzzer's log ("#123 DONE cov: 10 ft: 20
# corp: 5/100b exec/s: 7"), or "?".
stat() { grep -oE "$2: *[0-9]+" "$1" | tail -1 | grep -oE '[0-9]+$' || echo '?'; }

failed=0
echo "fuzz.sh: ${seconds}s per target; corpora under ${WORK}, reproducers under ${WORK}/crashes"
for t in "${targets[@]}"; do
  corpus="${WORK}/${t}"
  crashes="${WORK}/crashes/${t}"
  log="${WORK}/logs/${t}.log"
  mkdir -p "$corpus" "$crashes" "$(dirname "$log")"
  cp -n tests/fuzz/corpus/"${t}"/* "$corpus"/ 2>/dev/null || true
  before=$(find "$crashes" -type f | wc -l)
  marker="${WORK}/logs/.${t}.start"
  touch "$marker"
  args=(-max_total_time="$seconds" -print_final_stats=1 -timeout=25 -rss_limit_mb=2560
        -artifact_prefix="${crashes}/" "$corpus")
  if [[ "$jobs" -gt 1 ]]; then args=(-jobs="$jobs" -workers="$jobs" "${args[@]}"); fi
  rc=0
  (cd "$(dirname "$log")" && "${bin}/tests/fuzz/${t}" "${args[@]}") >"$log" 2>&1 || rc=$?
  # With -jobs the workers log to fuzz-N.log; fold them in.
  if [[ "$jobs" -gt 1 ]]; then cat "$(dirname "$log")"/fuzz-*.log >>"$log" 2>/dev/null || true; rm -f "$(dirname "$log")"/fuzz-*.log; fi
  execs=$(stat "$log" stat::number_of_executed_units)
  [[ "$execs" == '?' ]] && execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || echo '?')
  printf '%-22s execs=%s exec/s=%s corpus=%s cov=%s ft=%s\n' "$t" "$execs" \
    "$(stat "$log" stat::average_exec_per_sec)" "$(find "$corpus" -type f | wc -l)" \
    "$(stat "$log" cov)" "$(stat "$log" ft)"
  after=$(find "$crashes" -type f | wc -l)
  if [[ "$rc" -ne 0 || "$after" -gt "$before" ]]; then
    failed=1
    echo "  FOUND A BUG (exit ${rc}); log: ${log}" >&2
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -3 | sed 's/^/  /' >&2 || true
    find "$crashes" -type f -newer "$marker" | sed 's/^/  reproducer: /' >&2 || true
  fi
done
if [[ "$failed" -ne 0 ]]; then
  echo "fuzz.sh: findings above. Reproduce with: ${bin}/tests/fuzz/TARGET REPRODUCER" >&2
  exit 1
fi
