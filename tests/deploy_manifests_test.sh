#!/usr/bin/env bash
# Runs tests/deploy_manifests_test.py with Debian's Python (python3-yaml and
# python3-kubernetes, installed by `make deps`).
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
PY=/usr/bin/python3
if ! "$PY" -c 'import yaml, kubernetes.client' 2>/dev/null; then
  echo "deploy_manifests_test: Debian's python3-yaml and python3-kubernetes are needed (make deps installs them)" >&2
  exit 1
fi
exec "$PY" -B tests/deploy_manifests_test.py "$PWD"
