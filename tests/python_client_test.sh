#!/usr/bin/env bash
# Runs tests/python_client_test.py under pytest with Debian's Python: the
# weft Python package (python/) against a real `weft local` cluster over
# mTLS. The package and proto/ are copied out of the runfiles first, since
# the package generates its gRPC modules beside itself on first import.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
src="$PWD"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/pyclient.XXXXXX")"
mkdir -p "$work/tree"
cp -rL python proto examples "$work/tree/"
export WEFT="$src/client/weft" WEFT_BINARY="$src/client/weft" WEFT_SOURCE_TREE="$work/tree" \
  PYTHONPATH="$work/tree/python" PYTHONDONTWRITEBYTECODE=1
junit=()
if [ -n "${XML_OUTPUT_FILE:-}" ]; then junit=(--junitxml="$XML_OUTPUT_FILE"); fi
exec /usr/bin/python3 -m pytest -p no:cacheprovider --rootdir="$src" -v -rs \
  -o junit_suite_name=python_client_test "${junit[@]}" tests/python_client_test.py
