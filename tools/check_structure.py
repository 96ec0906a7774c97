#!/usr/bin/env python3
"""Checks the shape of weft's source tree (docs/architecture.md, "The map").

Three rules, each a promise the layout makes to a reader:

  floors    an #include never climbs: a file may include its own package and
            the floors below it, in the order of FLOORS. tests/, tools/,
            bench/ and examples/ stand on top and may include anything.
  grpc      a file that includes gRPC's C++ API is an adapter or the wiring
            of a daemon, and its name says so (GRPC_NAME).
  size      no source file (tests and test helpers aside) is longer than
            MAX_FILE_LINES lines, and no function in one is longer than
            MAX_FUNCTION_LINES lines.

Usage: check_structure.py [--root DIR] [--list-functions N]
Exit status 0 when every rule holds; 1 with one line per breach otherwise,
each naming the file, the line and the rule.
"""

import argparse
import os
import re
import sys

# Lowest first. A package may include itself and any package on a lower
# floor; packages on one floor may not include each other.
FLOORS = [
    ("proto",),
    ("common",),
    ("graph",),
    ("runtime",),
    ("job",),
    ("worker",),
    ("ps",),
    ("master",),
    ("client",),
]
ON_TOP = ("tests", "tools", "bench", "examples")
SOURCE = re.compile(r"\.(cc|h|cu|cuh)$")
MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80
# Adapters are named grpc_*; the wiring of a daemon or command is *_server or
# *_commands; chunk and tensor codings that write gRPC byte buffers are grpc_*.
GRPC_NAME = re.compile(r"(^grpc_|_server\.(h|cc)$|_commands\.(h|cc)$)")
GRPC_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]grpcpp/')
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def floor_of(package):
    for i, names in enumerate(FLOORS):
        if package in names:
            return i
    return None


def is_test_source(path):
    """Tests and the helpers only tests use are outside the size rule."""
    base = os.path.basename(path)
    parts = path.split(os.sep)
    return (
        parts[0] in ON_TOP
        or "testing" in parts
        or re.search(r"(_test|_test_util|_test_env|_fuzzer)\.(cc|h|cu)$", base) is not None
        or base.startswith(("test_", "fake_", "gated_"))
        or base.endswith("_benchmark.cc")
    )


def source_files(root):
    for top in sorted(os.listdir(root)):
        if top.startswith((".", "bazel-")) or not os.path.isdir(os.path.join(root, top)):
            continue
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if SOURCE.search(name):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def strip_code(text):
    """`text` with comments, string and character literals blanked out (line
    breaks kept), so that braces and keywords are the code's own."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            close = ")" + m.group(1) + '"'
            j = text.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def long_functions(text, limit):
    """(name, first line, lines) of each function body longer than `limit`
    lines. A function is a brace block opened at namespace or class scope
    whose header has a parameter list; its length runs from its header's
    first line to its closing brace."""
    code = strip_code(text)
    # Preprocessor lines (with their continuations) are not code.
    code = re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", "", code)
    found = []
    stack = []  # (kind, header line, name)
    header_start = None
    header = []
    line = 1
    for c in code:
        if c == "\n":
            line += 1
            if header:
                header.append(" ")
            continue
        if c == "{":
            text_before = "".join(header).strip()
            top = stack[-1][0] if stack else "namespace"
            if re.match(r"^(inline\s+)?namespace\b", text_before) or text_before.startswith('extern ""'):
                kind = "namespace"
            elif top in ("namespace", "class") and re.search(r"\b(class|struct|union|enum)\b[^(]*$", text_before):
                kind = "class"
            elif top in ("namespace", "class") and "(" in text_before and not text_before.endswith("="):
                kind = "function"
            else:
                kind = "block"
            name = ""
            m = re.search(r"([~\w:<>]+)\s*\(", text_before)
            if m:
                name = m.group(1)
            stack.append((kind, header_start if header_start is not None else line, name))
            header, header_start = [], None
        elif c == "}":
            if stack:
                kind, start, name = stack.pop()
                if kind == "function" and line - start + 1 > limit:
                    found.append((name, start, line - start + 1))
            header, header_start = [], None
        elif c == ";":
            header, header_start = [], None
        else:
            if header_start is None and not c.isspace():
                header_start = line
            if header_start is not None:
                header.append(c)
            if c == ":" and header and "".join(header).strip() in ("public:", "private:", "protected:"):
                header, header_start = [], None
    return found


def check(root, max_file_lines=MAX_FILE_LINES, max_function_lines=MAX_FUNCTION_LINES):
    breaches = []
    for path in source_files(root):
        package = path.split(os.sep)[0]
        floor = floor_of(package)
        if floor is None and package not in ON_TOP:
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.split("\n")
        includes_grpc = False
        for number, row in enumerate(lines, 1):
            if GRPC_INCLUDE.match(row):
                includes_grpc = True
            m = INCLUDE.match(row)
            if not m or floor is None:
                continue
            target = m.group(1).split("/")[0]
            target_floor = floor_of(target)
            if target_floor is None or target == package:
                continue
            if target_floor >= floor:
                breaches.append(
                    f"{path}:{number}: floors: {package} includes {m.group(1)}, "
                    f"but {target} is {'on the same floor' if target_floor == floor else 'a floor above'}"
                )
        if includes_grpc and floor is not None and not GRPC_NAME.search(os.path.basename(path)) and not is_test_source(path):
            breaches.append(
                f"{path}:1: grpc: includes gRPC's C++ API, so its name must say it is an adapter (grpc_*) "
                "or a daemon's wiring (*_server, *_commands)"
            )
        if floor is None or is_test_source(path):
            continue
        count = len(lines) - (1 if text.endswith("\n") else 0)
        if count > max_file_lines:
            breaches.append(f"{path}:1: size: {count} lines, more than {max_file_lines}")
        for name, start, length in long_functions(text, max_function_lines):
            breaches.append(f"{path}:{start}: size: function {name or '(unnamed)'} is {length} lines, more than {max_function_lines}")
    return breaches


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    args = parser.parse_args(argv)
    breaches = check(args.root)
    for b in breaches:
        print(b)
    if breaches:
        print(f"check_structure: {len(breaches)} breach(es) of the layout rules (docs/architecture.md, 'The map')")
        return 1
    print("check_structure: floors, gRPC adapter names and sizes hold")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
