#!/usr/bin/env bash
# Installs the Debian packages named on the command line that are missing.
# Idempotent and quiet: prints nothing when everything is present.
#   tools/install_deps.sh [--no-install-recommends] PACKAGE...
# --no-install-recommends installs their dependencies but not what they
# recommend.
set -euo pipefail
options=()
if [ "${1:-}" = "--no-install-recommends" ]; then
  options+=(--no-install-recommends)
  shift
fi
missing=()
for pkg in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing Debian packages: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq "${options[@]}" "${missing[@]}" >/dev/null
