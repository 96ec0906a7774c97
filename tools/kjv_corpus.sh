#!/usr/bin/env bash
# Writes the King James Bible as plain text (about 4.3 MB) to $1: the corpus
# of examples/kjv_transformer.pbtxt. Debian ships it in bible-kjv and
# bible-kjv-text (`make deps` installs them); its `bible` program prints it,
# 80 columns wide, so the text is the same on every machine.
#
#   tools/kjv_corpus.sh data/kjv.txt
set -euo pipefail
out="${1:?usage: tools/kjv_corpus.sh OUTPUT}"
if ! command -v bible >/dev/null; then
  echo "kjv_corpus: no 'bible' program: install Debian's bible-kjv (make deps does)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
COLUMNS=80 bible -l80 "gen1:1-rev22:21" > "$tmp"
bytes=$(wc -c < "$tmp")
if [ "$bytes" -lt 4000000 ]; then
  echo "kjv_corpus: bible printed $bytes bytes, not the whole book" >&2
  exit 1
fi
mv "$tmp" "$out"
