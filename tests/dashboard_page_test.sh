#!/usr/bin/env bash
# Runs tests/dashboard_page_test.py (the dashboard's page, script and style
# sheet served with a fake /api/overview, rendered by headless Chromium)
# under pytest with Debian's Python, writing the JUnit XML that Bazel reads
# ($XML_OUTPUT_FILE). The screenshot lands in $TEST_UNDECLARED_OUTPUTS_DIR.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
PY=/usr/bin/python3
if ! "$PY" -c 'import pytest' 2>/dev/null; then
  echo "dashboard_page_test: Debian's python3-pytest is needed (make deps installs it)" >&2
  exit 1
fi
if [ ! -x /usr/bin/chromium ]; then
  echo "dashboard_page_test: Debian's chromium is needed at /usr/bin/chromium (make deps installs it)" >&2
  exit 1
fi
export WEFT_DASHBOARD_DIR="$PWD/master/dashboard" PYTHONDONTWRITEBYTECODE=1
# Chromium writes its crash reports and caches under HOME.
export HOME="$TEST_TMPDIR/home"
mkdir -p "$HOME"
junit=()
if [ -n "${XML_OUTPUT_FILE:-}" ]; then junit=(--junitxml="$XML_OUTPUT_FILE"); fi
exec timeout 280 "$PY" -m pytest -p no:cacheprovider --rootdir="$PWD" -v -s \
  -o junit_suite_name=dashboard_page_test "${junit[@]}" \
  tests/dashboard_page_test.py
