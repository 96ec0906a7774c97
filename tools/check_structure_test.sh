#!/usr/bin/env bash
# Runs tools/check_structure_test.py under Debian's pytest, one JUnit case per
# test. The last case checks the checkout itself, so the target is tagged
# "external" (never cached): its real input is every source file.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
PY=/usr/bin/python3
if ! "$PY" -c 'import pytest' 2>/dev/null; then
  echo "check_structure_test: Debian's python3-pytest is needed (make deps installs it)" >&2
  exit 1
fi
exec "$PY" -B -m pytest -q -p no:cacheprovider --junitxml="${XML_OUTPUT_FILE:-/dev/null}" tools/check_structure_test.py
