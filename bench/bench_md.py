#!/usr/bin/env python3
"""Rewrites one block of BENCHMARKS.md, leaving every other block as it is.

Usage: bench_md.py FILE KEY [--after KEY2 | --before KEY2] < markdown

Each benchmark owns the blocks it writes, delimited by

    <!-- bench:KEY -->
    ...
    <!-- /bench:KEY -->

The block KEY is replaced with stdin. When FILE has no such block, it goes
right after (or before) block KEY2 if FILE has that one, else at the end
(after a header when FILE does not exist yet). A new benchmark adds its own
section by picking a new KEY.
"""
import os
import re
import sys

HEADER = """# Benchmarks

Written by `make bench` (`bench/run.sh`) and, for the profiles, by the scripts
named in each section. Every figure is measured on the machine named beside
it, in the same run as the peer it is compared with; only ratios within one
run mean much, absolute figures move with the machine and its load. Each
section lies between `<!-- bench:KEY -->` markers and is rewritten by
`bench/bench_md.py`; text outside the markers is left alone.
"""


def markers(key):
    return f"<!-- bench:{key} -->", f"<!-- /bench:{key} -->"


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] not in ("--after", "--before")):
        sys.stderr.write(__doc__)
        return 2
    path, key = argv[1], argv[2]
    where, anchor = (argv[3], argv[4]) if len(argv) == 5 else (None, None)
    for k in (key, anchor):
        if k is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", k):
            sys.stderr.write(f"bench_md.py: key '{k}' must be letters, digits, '.', '_' or '-'\n")
            return 2
    body = sys.stdin.read().strip("\n")
    begin, end = markers(key)
    block = f"{begin}\n{body}\n{end}"
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else HEADER
    i, j = text.find(begin), text.find(end)
    if (i < 0) != (j < 0) or (i >= 0 and j < i):
        sys.stderr.write(f"bench_md.py: {path} has a broken '{key}' block (one marker missing or out of order)\n")
        return 1
    if i >= 0:
        text = text[:i] + block + text[j + len(end):]
    else:
        a_begin, a_end = markers(anchor) if anchor else (None, None)
        if anchor and where == "--after" and a_end in text:
            k = text.index(a_end) + len(a_end)
            text = text[:k] + "\n\n" + block + text[k:]
        elif anchor and where == "--before" and a_begin in text:
            k = text.index(a_begin)
            text = text[:k] + block + "\n\n" + text[k:]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
