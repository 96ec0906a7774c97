#!/usr/bin/env bash
# Writes .bazelrc.user (ignored by git) for this machine: --config=cuda when
# the CUDA toolkit is installed, so that every plain `bazel` command and every
# make target share one build configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
want=""
if [ -x /usr/local/cuda/bin/nvcc ]; then want="build --config=cuda"; fi
if [ ! -f .bazelrc.user ] || [ "$(cat .bazelrc.user)" != "$want" ]; then
  printf '%s\n' "$want" > .bazelrc.user
fi
