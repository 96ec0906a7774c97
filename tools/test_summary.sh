#!/usr/bin/env bash
# Prints "N passed, N failed[, N skipped]" for the GoogleTest cases that ran,
# read from the JUnit XML that Bazel keeps for each test target. Exits 1 when
# any case failed or a target left no XML.
#   tools/test_summary.sh TESTLOGS_DIR TARGET...
set -uo pipefail
logs="$1"
shift
passed=0 failed=0 skipped=0 missing=0
for target in "$@"; do
  path="${target#//}"
  path="${path/://}"
  xml="$logs/$path/test.xml"
  if [ ! -f "$xml" ]; then
    echo "no test results for $target" >&2
    missing=$((missing + 1))
    continue
  fi
  # One record per <testcase>: failed if it holds <failure or <error, skipped
  # if gtest marked it so.
  read -r p f s < <(awk '
    /<testcase /  { open = 1; bad = 0; skip = ($0 ~ /result="skipped"/ || $0 ~ /status="notrun"/) }
    open && (/<failure/ || /<error/) { bad = 1 }
    open && (/<\/testcase>/ || /<testcase [^>]*\/>/) {
      if (bad) f++; else if (skip) s++; else p++;
      open = 0
    }
    END { print p + 0, f + 0, s + 0 }' "$xml")
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
done
failed=$((failed + missing))
if [ "$skipped" -gt 0 ]; then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
