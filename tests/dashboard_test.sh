#!/usr/bin/env bash
# Runs tests/dashboard_test.py (a real `weft local` cluster training
# Fashion-MNIST, its master's dashboard rendered by headless Chromium) under
# pytest with Debian's Python, writing the JUnit XML that Bazel reads
# ($XML_OUTPUT_FILE). The screenshot, dashboard.png, lands in
# $TEST_UNDECLARED_OUTPUTS_DIR (zipped by Bazel into bazel-testlogs/tests/
# dashboard_test/test.outputs/outputs.zip). `timeout` is the backstop inside
# Bazel's 300 s.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
PY=/usr/bin/python3
if ! "$PY" -c 'import pytest' 2>/dev/null; then
  echo "dashboard_test: Debian's python3-pytest is needed (make deps installs it)" >&2
  exit 1
fi
if [ ! -x /usr/bin/chromium ]; then
  echo "dashboard_test: Debian's chromium is needed at /usr/bin/chromium (make deps installs it)" >&2
  exit 1
fi
export WEFT="$PWD/client/weft" WEFT_DASHBOARD_DIR="$PWD/master/dashboard" PYTHONDONTWRITEBYTECODE=1
export HOME="$TEST_TMPDIR/home"
mkdir -p "$HOME"
junit=()
if [ -n "${XML_OUTPUT_FILE:-}" ]; then junit=(--junitxml="$XML_OUTPUT_FILE"); fi
exec timeout 285 "$PY" -m pytest -p no:cacheprovider --rootdir="$PWD" -v -s \
  -o junit_suite_name=dashboard_test "${junit[@]}" \
  tests/dashboard_test.py
