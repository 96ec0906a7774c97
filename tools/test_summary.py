#!/usr/bin/env python3
"""The summary line of `make test`, from what Bazel reports for this run.

    test_summary.py --bep BEP.json [TARGET...]

BEP.json is the build event stream of the `bazel test` that just ran
(--build_event_json_file). TARGETs are the test targets that should have run
(`bazel query 'tests(//...)'`); one that left no result in this run's stream
failed, whatever its last run left on disk.

A target passes only if Bazel says it passed in this run and its per-case
report holds no failure. Cases are counted from the report each attempt wrote
(GoogleTest's XML, pytest's JUnit XML; the one Bazel makes for a test that
writes none), found through the stream, so the configuration that really ran
(--config=asan, ...) is the one read. A target that exited non-zero after
every case passed (a leak report, a crash at exit) counts one failed case, so
a target that ran no case at all fails too, and so does one with no result
in this run: every failed target counts at least one failed case, so the
case count never reads clean while a target failed.

Prints the failed targets with why, the targets with skipped cases with the
first reason, then one line:
    N passed, N failed, N skipped; T test targets: T passed, T failed (T cached)
and exits 1 when anything failed.
"""
import argparse
import json
import os
import sys
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

PASSING = ("PASSED", "FLAKY")


def local_path(uri):
    """The file behind a file:// URI, or None for anything else."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme != "file":
        return None
    return urllib.request.url2pathname(parsed.path)


class Cases:
    """Case counts of one report, and what the failures and skips were."""

    def __init__(self):
        self.passed = self.failed = self.skipped = 0
        self.failures = []
        self.skip_reasons = []

    def add(self, other):
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped
        self.failures += other.failures
        self.skip_reasons += other.skip_reasons

    @property
    def total(self):
        return self.passed + self.failed + self.skipped


def read_report(path):
    """Cases of one JUnit-style XML report (GoogleTest, pytest or Bazel's own)."""
    cases = Cases()
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = ".".join(x for x in (case.get("classname"), case.get("name")) if x)
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skipped = case.find("skipped")
        if bad is not None:
            cases.failed += 1
            # GoogleTest's message starts "file:line", then says what failed.
            message = [l.strip() for l in (bad.get("message") or bad.text or "").splitlines() if l.strip()]
            cases.failures.append(name + (": " + " ".join(message[:2]) if message else ""))
        elif skipped is not None or case.get("result") == "skipped" or case.get("status") == "notrun":
            cases.skipped += 1
            reason = []
            if skipped is not None:
                reason = [l.strip() for l in (skipped.get("message") or skipped.text or "").splitlines() if l.strip()]
            # The reason is the message's last line (GoogleTest puts "file:line" first).
            cases.skip_reasons.append(name + (": " + reason[-1] if reason else ""))
        else:
            cases.passed += 1
    return cases


class Target:
    def __init__(self, label):
        self.label = label
        self.attempts = {}  # (run, shard) -> (attempt, testResult payload)
        self.overall = None  # testSummary.overallStatus
        self.build_failed = None  # why the target did not build, if it did not
        self.cached = False
        self.is_test = False  # configured as a *_test rule
        self.cases = Cases()
        self.problems = []

    def failed(self):
        return bool(self.problems) or self.cases.failed > 0


def read_stream(path):
    """(targets by label, Bazel's exit code name or None) from a JSON build event file."""
    targets = {}
    exit_code = None

    def target(label):
        if label not in targets:
            targets[label] = Target(label)
        return targets[label]

    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError as e:
                raise SystemExit("%s:%d: not a build event: %s" % (path, n, e))
            ids = event.get("id", {})
            if "testResult" in ids:
                key = ids["testResult"]
                t = target(key["label"])
                run_shard = (key.get("run", 1), key.get("shard", 1))
                attempt = key.get("attempt", 1)
                if run_shard not in t.attempts or t.attempts[run_shard][0] < attempt:
                    t.attempts[run_shard] = (attempt, event.get("testResult", {}))
            elif "testSummary" in ids:
                target(ids["testSummary"]["label"]).overall = event.get("testSummary", {}).get("overallStatus")
            elif "targetCompleted" in ids:
                label = ids["targetCompleted"]["label"]
                if "aborted" in event:
                    aborted = event["aborted"]
                    target(label).build_failed = aborted.get("description") or aborted.get("reason") or "aborted"
                elif not event.get("completed", {}).get("success", False):
                    target(label).build_failed = "failed to build"
            elif "targetConfigured" in ids:
                t = target(ids["targetConfigured"]["label"])
                if "aborted" in event:
                    aborted = event["aborted"]
                    t.build_failed = aborted.get("description") or aborted.get("reason") or "could not be configured"
                elif event.get("configured", {}).get("targetKind", "").endswith("_test rule"):
                    t.is_test = True
            elif "buildFinished" in ids:
                exit_code = event.get("finished", {}).get("exitCode", {}).get("name", "SUCCESS")
    return targets, exit_code


def judge(t):
    """Fills t.cases and t.problems from this run's results of the target."""
    if not t.attempts:
        if t.build_failed:
            t.problems.append(t.build_failed if t.build_failed != "failed to build" else "failed to build")
        else:
            t.problems.append("no result in this run (not built or not run)")
        return
    for (run, shard), (attempt, result) in sorted(t.attempts.items()):
        status = result.get("status", "NO_STATUS")
        t.cached = t.cached or bool(result.get("cachedLocally") or result.get("cachedRemotely"))
        where = "" if len(t.attempts) == 1 else " (run %d, shard %d)" % (run, shard)
        outputs = {o.get("name"): o.get("uri", "") for o in result.get("testActionOutput", [])}
        cases = None
        xml = local_path(outputs.get("test.xml", ""))
        if xml is None:
            t.problems.append("left no per-case report%s" % where)
        else:
            try:
                cases = read_report(xml)
            except (OSError, ET.ParseError) as e:
                t.problems.append("its per-case report %s cannot be read%s: %s" % (xml, where, e))
        if cases is not None:
            t.cases.add(cases)
            if cases.total == 0:
                t.problems.append("ran no test cases%s" % where)
        if status not in PASSING:
            if cases is not None and cases.failed == 0:
                # Every case passed, yet the process failed: count it.
                t.cases.failed += 1
                t.cases.failures.append("%s%s: %s after its cases passed (exit status, crash at exit or a "
                                        "sanitizer report: see its test.log)" % (t.label, where, status))
            elif cases is None:
                t.cases.failed += 1
                t.cases.failures.append("%s%s: %s" % (t.label, where, status))
        elif cases is not None and cases.failed > 0:
            t.problems.append("Bazel says %s but its report holds %d failed case(s)%s" % (status, cases.failed, where))
    if t.overall is not None and t.overall not in PASSING and not t.failed():
        t.problems.append("Bazel's verdict is %s" % t.overall)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bep", required=True, help="the JSON build event file of the bazel test run")
    parser.add_argument("targets", nargs="*", help="test targets that should have run")
    args = parser.parse_args(argv)

    if not os.path.exists(args.bep):
        print("test summary: no build event file %s: did bazel test run at all?" % args.bep, file=sys.stderr)
        return 1
    targets, exit_code = read_stream(args.bep)
    for label in args.targets:
        if label not in targets:
            targets[label] = Target(label)
    # Only test targets: the stream also lists the other targets of //...
    tests = [t for label, t in sorted(targets.items())
             if t.is_test or t.attempts or t.overall is not None or label in args.targets]
    cases = Cases()
    failed_targets = cached = 0
    for t in tests:
        judge(t)
        if t.problems and t.cases.failed == 0:
            # A target that failed without a failed case (not built, no
            # report, no cases) still counts one: the line never reads clean.
            t.cases.failed += 1
            t.cases.failures.append("%s: %s" % (t.label, t.problems[0]))
        cases.add(t.cases)
        if t.failed():
            failed_targets += 1
            print("FAILED %s: %s" % (t.label, "; ".join(t.problems) or "%d failed case(s)" % t.cases.failed))
            names = [n for n in t.cases.failures if not t.problems or n != "%s: %s" % (t.label, t.problems[0])]
            for name in names[:5]:
                print("    " + name)
            if len(names) > 5:
                print("    ... and %d more" % (len(names) - 5))
        if t.cached:
            cached += 1
    for t in tests:
        if t.cases.skipped:
            print("skipped %d in %s: %s" % (t.cases.skipped, t.label, t.cases.skip_reasons[0]))
    trouble = failed_targets > 0 or cases.failed > 0
    if exit_code is None:
        print("the build event file has no end: bazel stopped before finishing")
        trouble = True
    elif exit_code != "SUCCESS" and not trouble:
        print("bazel ended with %s although every test target passed" % exit_code)
        trouble = True
    print("%d passed, %d failed, %d skipped; %d test targets: %d passed, %d failed (%d cached)"
          % (cases.passed, cases.failed, cases.skipped, len(tests), len(tests) - failed_targets, failed_targets, cached))
    return 1 if trouble else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
