"""tools/test_summary.py fed build event streams made to order: a passing,
a failing, a stale and a crashed-at-exit target, and the other ways a run can
look better than it was."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

TOOL = pathlib.Path(os.environ.get("WEFT_SOURCE_ROOT", ".")) / "tools" / "test_summary.py"

GTEST_PASS = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="3" failures="0" disabled="0" errors="0" name="AllTests">
  <testsuite name="Suite" tests="3" failures="0" disabled="0" skipped="1" errors="0">
    <testcase name="A" status="run" result="completed" classname="Suite" />
    <testcase name="B" status="run" result="completed" classname="Suite" />
    <testcase name="C" status="run" result="skipped" classname="Suite">
      <skipped message="gpu_test.cc:9&#x0A;no GPU present"><![CDATA[gpu_test.cc:9
no GPU present]]></skipped>
    </testcase>
  </testsuite>
</testsuites>
"""

GTEST_FAIL = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="2" failures="1" name="AllTests">
  <testsuite name="Kernel" tests="2" failures="1">
    <testcase name="Adds" status="run" result="completed" classname="Kernel">
      <failure message="kernel.cc:12&#x0A;Expected equality" type=""><![CDATA[kernel.cc:12]]></failure>
    </testcase>
    <testcase name="Muls" status="run" result="completed" classname="Kernel" />
  </testsuite>
</testsuites>
"""

GTEST_EMPTY = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="0" failures="0" name="AllTests">
</testsuites>
"""


def pytest_report(passed, skipped=0, failed=0):
    cases = ['<testcase classname="deploy_test.RenderedTest" name="test_%d" />' % i for i in range(passed)]
    cases += ['<testcase classname="deploy_test.Multi" name="test_skip_%d"><skipped type="pytest.skip" '
              'message="cannot create a network namespace">why</skipped></testcase>' % i for i in range(skipped)]
    cases += ['<testcase classname="deploy_test.RenderedTest" name="test_bad_%d"><failure message="AssertionError">'
              'tb</failure></testcase>' % i for i in range(failed)]
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="%d">%s'
            '</testsuite></testsuites>' % (passed + skipped + failed, "".join(cases)))


class Run:
    """A build event stream under construction, with reports written to tmp."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.events = []

    def report(self, label, text, sub="k8-opt"):
        d = self.tmp / sub / "testlogs" / label.strip("/").replace(":", "/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "test.xml").write_text(text)
        return d / "test.xml"

    def configured(self, label, kind="cc_test rule"):
        self.events.append({"id": {"targetConfigured": {"label": label}}, "configured": {"targetKind": kind}})

    def result(self, label, status, xml=None, shard=1, attempt=1, cached=False):
        outputs = [{"name": "test.log", "uri": "file://%s/test.log" % self.tmp}]
        if xml is not None:
            outputs.append({"name": "test.xml", "uri": "file://%s" % xml})
        payload = {"status": status, "testActionOutput": outputs}
        if cached:
            payload["cachedLocally"] = True
        self.events.append({"id": {"testResult": {"label": label, "run": 1, "shard": shard, "attempt": attempt}},
                            "testResult": payload})

    def summary(self, label, status):
        self.events.append({"id": {"testSummary": {"label": label}}, "testSummary": {"overallStatus": status}})

    def build_failed(self, label):
        self.events.append({"id": {"targetCompleted": {"label": label}}, "completed": {"success": False}})

    def finished(self, name="SUCCESS"):
        self.events.append({"id": {"buildFinished": {}}, "finished": {"exitCode": {"name": name}}})

    def passing(self, label, text=GTEST_PASS, **kw):
        self.configured(label)
        self.result(label, "PASSED", self.report(label, text), **kw)
        self.summary(label, "PASSED")

    def summarise(self, *expected):
        bep = self.tmp / "bep.json"
        bep.write_text("".join(json.dumps(e) + "\n" for e in self.events))
        p = subprocess.run([sys.executable, str(TOOL), "--bep", str(bep)] + list(expected),
                           capture_output=True, text=True, check=False)
        lines = p.stdout.strip().splitlines()
        assert lines, p.stderr
        return p.returncode, lines[-1], p.stdout


@pytest.fixture
def run(tmp_path):
    return Run(tmp_path)


def test_passing_target_counts_its_cases_and_skips(run):
    run.passing("//a:ok")
    run.finished()
    rc, line, out = run.summarise("//a:ok")
    assert rc == 0, out
    assert line == "2 passed, 0 failed, 1 skipped; 1 test targets: 1 passed, 0 failed (0 cached)"
    assert "skipped 1 in //a:ok: Suite.C: no GPU present" in out


def test_failing_target_counts_its_failed_case(run):
    run.passing("//a:ok")
    run.configured("//a:bad")
    run.result("//a:bad", "FAILED", run.report("//a:bad", GTEST_FAIL))
    run.summary("//a:bad", "FAILED")
    run.finished("TESTS_FAILED")
    rc, line, out = run.summarise("//a:ok", "//a:bad")
    assert rc == 1
    assert line.startswith("3 passed, 1 failed, 1 skipped; 2 test targets: 1 passed, 1 failed")
    assert "FAILED //a:bad" in out and "Kernel.Adds: kernel.cc:12 Expected equality" in out


def test_stale_report_of_a_target_that_did_not_build_is_not_read(run):
    # Last run's all-pass report is still on disk where the target's
    # testlogs are, but this run's stream has no result for it.
    run.report("//a:stale", GTEST_PASS)
    run.passing("//a:ok")
    run.configured("//a:stale")
    run.build_failed("//a:stale")
    run.finished("BUILD_FAILURE")
    rc, line, out = run.summarise("//a:ok", "//a:stale")
    assert rc == 1
    assert line.startswith("2 passed, 1 failed, 1 skipped; 2 test targets: 1 passed, 1 failed")
    assert "FAILED //a:stale: failed to build" in out


def test_expected_target_missing_from_the_stream_fails(run):
    run.passing("//a:ok")
    run.finished()
    rc, line, out = run.summarise("//a:ok", "//a:never_ran")
    assert rc == 1
    assert "FAILED //a:never_ran: no result in this run" in out
    assert line.startswith("2 passed, 1 failed")


def test_crash_at_exit_after_an_all_pass_report_fails(run):
    run.configured("//a:leaks")
    run.result("//a:leaks", "FAILED", run.report("//a:leaks", GTEST_PASS))
    run.summary("//a:leaks", "FAILED")
    run.finished("TESTS_FAILED")
    rc, line, out = run.summarise("//a:leaks")
    assert rc == 1
    assert line.startswith("2 passed, 1 failed, 1 skipped; 1 test targets: 0 passed, 1 failed")
    assert "after its cases passed" in out


def test_report_read_from_the_configuration_that_ran(run):
    # An asan run: the stream points at k8-dbg; a stale k8-opt report of the
    # same target must not be what is counted.
    run.report("//a:t", GTEST_FAIL, sub="k8-opt")
    run.configured("//a:t")
    run.result("//a:t", "PASSED", run.report("//a:t", GTEST_PASS, sub="k8-dbg"))
    run.summary("//a:t", "PASSED")
    run.finished()
    rc, line, _ = run.summarise("//a:t")
    assert rc == 0
    assert line.startswith("2 passed, 0 failed, 1 skipped")


def test_python_cases_count_one_by_one(run):
    run.configured("//tests:deploy", kind="sh_test rule")
    run.result("//tests:deploy", "PASSED", run.report("//tests:deploy", pytest_report(40, skipped=2)))
    run.summary("//tests:deploy", "PASSED")
    run.finished()
    rc, line, out = run.summarise("//tests:deploy")
    assert rc == 0, out
    assert line.startswith("40 passed, 0 failed, 2 skipped")


def test_target_with_no_cases_fails(run):
    run.configured("//a:empty")
    run.result("//a:empty", "PASSED", run.report("//a:empty", GTEST_EMPTY))
    run.summary("//a:empty", "PASSED")
    run.finished()
    rc, line, out = run.summarise("//a:empty")
    assert rc == 1
    assert "ran no test cases" in out
    assert line.startswith("0 passed, 1 failed")


def test_pass_verdict_with_a_failed_case_in_the_report_fails(run):
    run.configured("//a:liar")
    run.result("//a:liar", "PASSED", run.report("//a:liar", GTEST_FAIL))
    run.summary("//a:liar", "PASSED")
    run.finished()
    rc, line, out = run.summarise("//a:liar")
    assert rc == 1
    assert "holds 1 failed case" in out


def test_only_the_last_attempt_of_each_shard_counts(run):
    label = "//a:sharded"
    run.configured(label)
    run.result(label, "FAILED", run.report(label, GTEST_FAIL), shard=1, attempt=1)
    second = run.tmp / "attempt2.xml"
    second.write_text(GTEST_PASS)
    run.result(label, "PASSED", second, shard=1, attempt=2)
    other = run.tmp / "shard2.xml"
    other.write_text(pytest_report(4))
    run.result(label, "PASSED", other, shard=2, attempt=1, cached=True)
    run.summary(label, "FLAKY")
    run.finished()
    rc, line, out = run.summarise(label)
    assert rc == 0, out
    assert line == "6 passed, 0 failed, 1 skipped; 1 test targets: 1 passed, 0 failed (1 cached)"


def test_unreadable_report_fails(run):
    run.configured("//a:garbled")
    run.result("//a:garbled", "PASSED", run.report("//a:garbled", "<testsuites><testcase"))
    run.summary("//a:garbled", "PASSED")
    run.finished()
    rc, _, out = run.summarise("//a:garbled")
    assert rc == 1
    assert "cannot be read" in out


def test_bazel_failing_with_every_target_passing_fails(run):
    run.passing("//a:ok")
    run.finished("BUILD_FAILURE")  # e.g. a non-test target broke
    rc, _, out = run.summarise("//a:ok")
    assert rc == 1
    assert "bazel ended with BUILD_FAILURE" in out


def test_a_stream_without_its_end_fails(run):
    run.passing("//a:ok")
    rc, _, out = run.summarise("//a:ok")
    assert rc == 1
    assert "has no end" in out


def test_the_real_bazel_stream_shape_is_read(run):
    # The event shapes Bazel 4.2 writes, as they come (one JSON object per
    # line, with children and configuration ids).
    xml = run.report("//common:t", GTEST_PASS)
    config = {"id": "df91"}
    run.events += [
        {"id": {"targetConfigured": {"label": "//common:t"}},
         "children": [{"targetCompleted": {"label": "//common:t", "configuration": config}}],
         "configured": {"targetKind": "cc_test rule", "testSize": "SMALL"}},
        {"id": {"targetCompleted": {"label": "//common:t", "configuration": config}},
         "completed": {"success": True, "testTimeoutSeconds": "60"}},
        {"id": {"testResult": {"label": "//common:t", "run": 1, "shard": 1, "attempt": 1, "configuration": config}},
         "testResult": {"testActionOutput": [{"name": "test.xml", "uri": "file://%s" % xml}],
                        "cachedLocally": True, "status": "PASSED"}},
        {"id": {"testSummary": {"label": "//common:t", "configuration": config}},
         "testSummary": {"totalRunCount": 1, "overallStatus": "PASSED"}},
        {"id": {"targetConfigured": {"label": "//common:lib"}}, "configured": {"targetKind": "cc_library rule"}},
        {"id": {"buildFinished": {}}, "finished": {"overallSuccess": True, "exitCode": {"name": "SUCCESS"}}},
    ]
    rc, line, out = run.summarise()
    assert rc == 0, out
    assert line == "2 passed, 0 failed, 1 skipped; 1 test targets: 1 passed, 0 failed (1 cached)"
