#!/usr/bin/env bash
# Builds the release `weft` binary the way CI does, and stages it for a
# container image. The Dockerfiles run this script, so the image holds what
# `make build` builds: the same Debian packages (`make deps`, which also turns
# on CUDA when the toolkit is present), the same .bazelrc, the same target.
#
#   tools/build_release.sh OUT_DIR
#
# OUT_DIR receives:
#   weft                    the binary
#   runtime-packages.txt    the Debian packages that hold the shared
#                           libraries it links (from ldd), one per line: the
#                           runtime image installs exactly these.
set -euo pipefail
out="${1:?usage: tools/build_release.sh OUT_DIR}"
cd "$(dirname "$0")/.."
BAZEL="${BAZEL:-bazel}"

make -s deps
"$BAZEL" build //client:weft
bin="$("$BAZEL" info bazel-bin 2>/dev/null)/client/weft"

mkdir -p "$out"
install -m 0755 "$bin" "$out/weft"
# Each linked library's owning package; libraries no package owns (a CUDA
# toolkit unpacked by hand) are reported, not guessed.
ldd "$bin" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  real="$(readlink -f "$lib")"
  pkg="$(dpkg -S "$real" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true)"
  if [ -z "$pkg" ]; then
    echo "build_release: $lib belongs to no Debian package" >&2
    continue
  fi
  echo "${pkg%%:*}"
done | sort -u > "$out/runtime-packages.txt"
echo "build_release: $out/weft, runtime packages: $(tr '\n' ' ' < "$out/runtime-packages.txt")" >&2
