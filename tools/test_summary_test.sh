#!/usr/bin/env bash
# Runs tools/test_summary_test.py under Debian's pytest (python3-pytest,
# installed by `make deps`), one JUnit case per test for the summary to count.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
PY=/usr/bin/python3
if ! "$PY" -c 'import pytest' 2>/dev/null; then
  echo "test_summary_test: Debian's python3-pytest is needed (make deps installs it)" >&2
  exit 1
fi
export WEFT_SOURCE_ROOT="$PWD"
exec "$PY" -B -m pytest -q -p no:cacheprovider --junitxml="${XML_OUTPUT_FILE:-/dev/null}" tools/test_summary_test.py
