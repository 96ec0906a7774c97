#!/usr/bin/env bash
# Runs tests/deploy_manifests_test.py under pytest with Debian's Python
# (python3-pytest, python3-yaml, python3-kubernetes) and the kubectl on PATH
# (Debian's kubernetes-client), all installed by `make deps`. pytest writes
# each test case to the JUnit XML that Bazel reads ($XML_OUTPUT_FILE) and
# exits non-zero when one fails.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
PY=/usr/bin/python3
if ! "$PY" -c 'import pytest, yaml, kubernetes.client' 2>/dev/null; then
  echo "deploy_manifests_test: Debian's python3-pytest, python3-yaml and python3-kubernetes are needed (make deps installs them)" >&2
  exit 1
fi
if ! command -v kubectl >/dev/null; then
  echo "deploy_manifests_test: no kubectl on PATH ($PATH): the manifests are rendered with \`kubectl kustomize\`; install Debian's kubernetes-client package (make deps does)" >&2
  exit 1
fi
# kustomize does not read kustomization files that are symbolic links, as
# runfiles are: the test reads a copy with the links resolved.
root="$TEST_TMPDIR/repo"
mkdir -p "$root"
cp -RL deploy tools "$root/"
export WEFT_REPO_ROOT="$root" WEFT="$PWD/client/weft" PYTHONDONTWRITEBYTECODE=1
junit=()
if [ -n "${XML_OUTPUT_FILE:-}" ]; then junit=(--junitxml="$XML_OUTPUT_FILE"); fi
exec "$PY" -m pytest -p no:cacheprovider --rootdir="$PWD" -v -rs \
  -o junit_suite_name=deploy_manifests_test "${junit[@]}" \
  tests/deploy_manifests_test.py
