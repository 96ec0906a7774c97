#!/usr/bin/env python3
"""Lints weft's Dockerfiles for the rules that matter here:

  - every base image is Debian 12 at an exact version (debian:12.N[-slim]) or
    a digest; never `latest` or a bare major version;
  - multi-stage: a build stage and a final stage, COPY --from naming a stage;
  - the build stage builds through tools/build_release.sh (the script that
    runs `make deps`, as CI does), nothing else runs bazel;
  - the final stage runs as a non-root USER;
  - no ADD (COPY for files; a URL fetch must be a checked RUN), no
    `curl ... | sh`;
  - apt-get install with --no-install-recommends, lists removed in the same RUN;
  - ENTRYPOINT in exec form, running weft.

    dockerfile_lint.py DOCKERFILE...    prints each problem; exit 1 if any
"""
import re
import sys


def instructions(text):
    """[(line number, INSTRUCTION, arguments)] with continuations joined."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        word, _, rest = buf.partition(" ")
        out.append((start, word.upper(), rest.strip()))
        buf = ""
    return out


def lint(text, name="Dockerfile"):
    problems = []

    def bad(n, msg):
        problems.append("%s:%d: %s" % (name, n, msg))

    ins = instructions(text)
    args = {}
    stages = []  # (line, image, alias)
    user_after_last_from = None
    builds_with_script = False
    for n, word, rest in ins:
        if word == "ARG":
            k, _, v = rest.partition("=")
            if not stages:
                args[k.strip()] = v.strip()
        elif word == "FROM":
            parts = rest.split()
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""), parts[0])
            alias = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append((n, image, alias))
            user_after_last_from = None
            if not re.fullmatch(r"debian:12\.\d+(-slim)?(@sha256:[0-9a-f]{64})?|debian@sha256:[0-9a-f]{64}", image):
                bad(n, "base image %r: use Debian 12 at an exact version (debian:12.N or debian:12.N-slim) "
                       "or a digest" % image)
        elif word == "USER":
            user_after_last_from = (n, rest)
        elif word == "ADD":
            bad(n, "ADD: use COPY for files; fetch URLs in a RUN that checks what it got")
        elif word == "RUN":
            if re.search(r"\b(curl|wget)\b[^|;&]*\|\s*(ba)?sh", rest):
                bad(n, "RUN pipes a download into a shell")
            if "tools/build_release.sh" in rest:
                builds_with_script = True
            if re.search(r"\bbazel\b", rest):
                bad(n, "RUN calls bazel directly: build through tools/build_release.sh, as CI does")
            if "apt-get install" in rest:
                if "--no-install-recommends" not in rest:
                    bad(n, "apt-get install without --no-install-recommends")
                if "rm -rf /var/lib/apt/lists" not in rest:
                    bad(n, "apt-get install without removing /var/lib/apt/lists in the same RUN")
        elif word == "COPY":
            m = re.search(r"--from=(\S+)", rest)
            if m and m.group(1) not in {a for _, _, a in stages if a}:
                bad(n, "COPY --from=%s names no earlier stage" % m.group(1))
        elif word == "ENTRYPOINT":
            if not re.fullmatch(r'\[\s*"(/usr/local/bin/)?weft"\s*(,.*)?\]', rest):
                bad(n, "ENTRYPOINT must be exec form running weft, e.g. [\"weft\"]")
    if len(stages) < 2:
        bad(1, "not multi-stage: build in one stage, run from a slim one")
    if not builds_with_script:
        bad(1, "no RUN tools/build_release.sh: the image must build the way CI does")
    if user_after_last_from is None:
        bad(stages[-1][0] if stages else 1, "the final stage sets no USER: it would run as root")
    elif user_after_last_from[1].split(":")[0] in ("root", "0"):
        bad(user_after_last_from[0], "the final stage runs as root")
    if not any(w == "ENTRYPOINT" for _, w, _ in ins):
        bad(1, "no ENTRYPOINT")
    return problems


def main(argv):
    if not argv:
        print("usage: dockerfile_lint.py DOCKERFILE...", file=sys.stderr)
        return 2
    problems = []
    for path in argv:
        with open(path) as f:
            problems += lint(f.read(), path)
    for p in problems:
        print(p, file=sys.stderr)
    print("dockerfile_lint: %d file(s), %d problem(s)" % (len(argv), len(problems)), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
