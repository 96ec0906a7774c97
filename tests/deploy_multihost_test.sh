#!/usr/bin/env bash
# Runs tests/deploy_multihost_test.py (the rendered manifests as a cluster of
# network-namespace "hosts") under pytest with Debian's Python, writing the
# JUnit XML that Bazel reads ($XML_OUTPUT_FILE); the case is reported
# skipped, saying why, where namespaces cannot be created. The test fails
# itself after 265 s; `timeout` is the backstop inside Bazel's 300 s.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
PY=/usr/bin/python3
if ! "$PY" -c 'import pytest, yaml' 2>/dev/null; then
  echo "deploy_multihost_test: Debian's python3-pytest and python3-yaml are needed (make deps installs them)" >&2
  exit 1
fi
if ! command -v kubectl >/dev/null; then
  echo "deploy_multihost_test: no kubectl on PATH ($PATH): the manifests are rendered with \`kubectl kustomize\`; install Debian's kubernetes-client package (make deps does)" >&2
  exit 1
fi
# kustomize does not read kustomization files that are symbolic links, as
# runfiles are: the test reads a copy with the links resolved.
root="$TEST_TMPDIR/repo"
mkdir -p "$root"
cp -RL deploy "$root/"
export WEFT_REPO_ROOT="$root" WEFT="$PWD/client/weft" PYTHONDONTWRITEBYTECODE=1
junit=()
if [ -n "${XML_OUTPUT_FILE:-}" ]; then junit=(--junitxml="$XML_OUTPUT_FILE"); fi
exec timeout 280 "$PY" -m pytest -p no:cacheprovider --rootdir="$PWD" -v -rs -s \
  -o junit_suite_name=deploy_multihost_test "${junit[@]}" \
  tests/deploy_multihost_test.py
