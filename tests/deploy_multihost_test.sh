#!/usr/bin/env bash
# Runs tests/deploy_multihost_test.py (the rendered manifests as a cluster of
# network-namespace "hosts") with Debian's Python; it skips, saying why, where
# namespaces cannot be created.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
exec timeout 280 /usr/bin/python3 -B tests/deploy_multihost_test.py "$PWD" "$PWD/client/weft"
