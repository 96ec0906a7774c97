#!/usr/bin/env bash
# Runs tests/observability_test.py under pytest with Debian's Python: a real
# Prometheus (Debian's prometheus package, installed by `make deps`) scrapes
# a `weft local` cluster, and `weft trace` records a running job. pytest
# writes the JUnit XML Bazel reads.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
export WEFT="$PWD/client/weft" PYTHONDONTWRITEBYTECODE=1
junit=()
if [ -n "${XML_OUTPUT_FILE:-}" ]; then junit=(--junitxml="$XML_OUTPUT_FILE"); fi
exec /usr/bin/python3 -m pytest -p no:cacheprovider --rootdir="$PWD" -v -rs \
  -o junit_suite_name=observability_test "${junit[@]}" tests/observability_test.py
