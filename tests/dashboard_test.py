#!/usr/bin/env python3
"""The web dashboard of a real `weft local` cluster, in headless Chromium.

Starts `weft local --workers=2 --metrics_port=0 --metrics_plaintext` (no
job: it serves until SIGTERM), reads the master's monitoring port from
LOG_DIR/master-0.metrics_port, and submits two Fashion-MNIST jobs
(MULTI_WORKER_MIRRORED, evaluated after every epoch) with `weft submit` as
the cluster's admin: a short one that must finish, then a long one that is
still running while the page is looked at. Once /api/overview shows the
running job with loss points and three evaluations (a bounded wait), Chromium
loads the dashboard the master serves: the page must have rendered
(body[data-ready]); the jobs table must show both jobs with their states
and progress, the running one selected; its loss curve (svg#loss-curve) a
<path class="series"> with its points, its accuracy curve one too; the
tasks table both workers up; and the browser must have reported no script
error or CSP violation. A 1280x900 screenshot is saved as dashboard.png in
$TEST_UNDECLARED_OUTPUTS_DIR (Bazel zips it into bazel-testlogs/tests/
dashboard_test/test.outputs/outputs.zip) and checked to show the header and
the loss curve. SIGTERM then stops `weft local` and its tasks.

Run with pytest (tests/dashboard_test.sh does, under Bazel):

    WEFT=bazel-bin/client/weft WEFT_DASHBOARD_SHOT=docs/images/dashboard.png \\
      python3 -m pytest -s tests/dashboard_test.py

WEFT_DASHBOARD_SHOT: also copy the screenshot there (how README's is made).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard_page_test as page  # noqa: E402  (Chromium, DOM and PNG helpers)

WEFT = os.path.abspath(os.environ.get("WEFT") or "client/weft")
DATA_DIR = "/usr/share/datasets/fashion-mnist"
# Bounded waits, together inside tests/dashboard_test.sh's 285 s.
START_S = 60  # weft local serving, with its monitoring port
SHORT_JOB_S = 60  # the short job done
TRAIN_S = 60  # the long job's first loss points and three evaluations
PAGE_S = 40  # the page showing them
STOP_S = 30  # weft local gone after SIGTERM

JOB = """
name: "%(name)s"
model {
  input_shape: [784]
  num_classes: 10
  layer { dense { units: 128 activation: RELU } }
  layer { dense { units: 64 activation: RELU } }
  layer { dense { units: 10 } }
}
dataset { format: IDX dir: "%(data)s" scale: 255 }
optimizer { adam { learning_rate: 0.001 } }
batch_size: %(batch)d
epochs: %(epochs)d
seed: 1
intra_op_threads: 1
eval { every_epochs: 1 }
strategy { kind: MULTI_WORKER_MIRRORED }
"""
SHORT = {"name": "fmnist-short", "epochs": 1, "batch": 128, "data": DATA_DIR}
# Cancelled long before its end: it must outlast the checks on any machine.
LONG = {"name": "fmnist-mlp", "epochs": 300, "batch": 512, "data": DATA_DIR}


def log(msg):
    print("[dashboard] " + msg, flush=True)


def tail(path, n=4000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError as e:
        return "(%s)" % e


class LocalCluster:
    """`weft local` serving (no job), as a child process in its own group."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.log_dir = os.path.join(workdir, "logs")
        os.makedirs(self.log_dir)
        self.stderr_path = os.path.join(workdir, "local.stderr")
        cmd = [WEFT, "local", "--workers=2", "--metrics_port=0", "--metrics_plaintext",
               "--log_dir=" + self.log_dir, "--checkpoint_root=" + os.path.join(workdir, "checkpoints")]
        log("starting: " + " ".join(cmd))
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def why(self):
        return "weft local's stderr (%s):\n%s" % (self.stderr_path, tail(self.stderr_path))

    def check_running(self):
        if self.proc.poll() is not None:
            raise AssertionError("weft local exited (%d). %s" % (self.proc.returncode, self.why()))

    def _wait_file(self, name, parse):
        path = os.path.join(self.log_dir, name)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            self.check_running()
            try:
                with open(path) as f:
                    value = parse(f.read())
                if value is not None:
                    return value
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        raise AssertionError("no %s within %d s. %s" % (path, START_S, self.why()))

    def metrics_port(self):
        return self._wait_file("master-0.metrics_port", lambda t: int(t) if t.endswith("\n") else None)

    def master_address(self):
        def parse(text):  # tasks.txt: "name pid address" lines
            for line in text.splitlines():
                f = line.split()
                if len(f) == 3 and f[0].startswith("master"):
                    return f[2]
            return None
        return self._wait_file("tasks.txt", parse)

    def submit(self, job):
        path = os.path.join(self.workdir, job["name"] + ".pbtxt")
        with open(path, "w") as f:
            f.write(JOB % job)
        tls = os.path.join(self.log_dir, "tls")
        cmd = [WEFT, "submit", "--master=" + self.master_address(), "--ca=" + os.path.join(tls, "ca.crt"),
               "--cert=" + os.path.join(tls, "local.crt"), "--key=" + os.path.join(tls, "local.key"), path]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, "%s failed (%d): %s. %s" % (" ".join(cmd), p.returncode, p.stderr, self.why())
        job_id = p.stdout.strip()
        log("submitted %s as %s" % (job["name"], job_id))
        return job_id

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
                raise AssertionError("weft local did not stop within %d s of SIGTERM. %s" % (STOP_S, self.why()))


def overview(base):
    with urllib.request.urlopen(base + "api/overview", timeout=5) as r:
        assert r.status == 200
        return json.loads(r.read())


def evaluations(job):
    """How many evaluations a job's history shows: accuracy values, a value
    repeated on the points after it counting once (as the page draws them)."""
    accs = [p["accuracy"] for p in job.get("history") or []
            if isinstance(p.get("accuracy"), (int, float)) and p["accuracy"] >= 0]
    return len([a for i, a in enumerate(accs) if i == 0 or a != accs[i - 1]])


def wait_for_job(cluster, base, job_id, done, deadline_s, what):
    """The overview once the job `job_id` in it satisfies `done(job)`."""
    deadline = time.monotonic() + deadline_s
    last, error = None, None
    while time.monotonic() < deadline:
        cluster.check_running()
        try:
            last = overview(base)
            error = None
        except Exception as e:  # a bad answer: keep trying until the deadline, then report it
            error = e
            time.sleep(0.5)
            continue
        job = next((j for j in last.get("jobs") or [] if j.get("job_id") == job_id), None)
        if job is not None:
            if job.get("state") in ("FAILED", "CANCELLED"):
                raise AssertionError("job %s %s: %s. %s" % (job_id, job["state"], job.get("error"), cluster.why()))
            if done(job):
                return last, job
        time.sleep(0.5)
    raise AssertionError("within %d s job %s never %s; the last overview: %s (error: %s). %s" % (
        deadline_s, job_id, what, json.dumps(last)[:3000], error, cluster.why()))


def test_dashboard_of_a_running_cluster():
    assert os.access(WEFT, os.X_OK), "no weft binary at %s" % WEFT
    assert os.path.isdir(DATA_DIR), "no Fashion-MNIST at %s: install Debian's dataset-fashion-mnist" % DATA_DIR
    workdir = page.workdir()
    cluster = LocalCluster(workdir)
    try:
        base = "http://127.0.0.1:%d/" % cluster.metrics_port()
        log("dashboard at " + base)
        # The page as the master serves it, before any job.
        with urllib.request.urlopen(base, timeout=5) as r:
            assert r.headers.get_content_type() == "text/html"
            assert 'id="jobs"' in r.read().decode()

        short_id = cluster.submit(SHORT)
        wait_for_job(cluster, base, short_id, lambda j: j.get("state") == "SUCCEEDED", SHORT_JOB_S, "succeeded")
        long_id = cluster.submit(LONG)
        _, job = wait_for_job(cluster, base, long_id,
                              lambda j: len(j.get("history") or []) >= 10 and evaluations(j) >= 3, TRAIN_S,
                              "had 10 loss points and 3 evaluations")
        log("job %s %s at step %s/%s: %d history points, %d evaluations" % (
            long_id, job["state"], job.get("step"), job.get("total_steps"), len(job["history"]), evaluations(job)))

        chromium = page.Chromium(workdir)
        # The screenshot first, while the job is young; checked below, once
        # the DOM has been.
        path = os.path.join(page.outputs_dir(), "dashboard.png")
        shot_console = chromium.screenshot(base, path)
        log("screenshot: " + path)
        if os.environ.get("WEFT_DASHBOARD_SHOT"):
            shutil.copyfile(path, os.environ["WEFT_DASHBOARD_SHOT"])
            log("copied to " + os.environ["WEFT_DASHBOARD_SHOT"])

        def rendered(dom):
            if not page.page_ready(dom):
                return False
            ids = [r.get("data-job") for r in page.job_rows(dom)]
            return long_id in ids and short_id in ids and page.series_points(dom, "loss-curve") is not None

        dom, console = page.dump_until(chromium, base, rendered, PAGE_S, "both jobs and a loss curve")
        page.assert_no_console(console)
        rows = {r.get("data-job"): r for r in page.job_rows(dom)}
        short, running = page.cells(rows[short_id]), page.cells(rows[long_id])
        assert short[1:4] == ["fmnist-short", "local", "succeeded"], short
        assert short[4].endswith("100 %") and short[7].endswith(" %"), short  # done, with its test accuracy
        assert running[1:4] == ["fmnist-mlp", "local", "running"], running
        assert running[5].endswith(" / 300") and running[6] != page.DASH and running[8] != page.DASH, running
        assert rows[long_id].find("progress") is not None, "no progress bar in %s" % running
        assert "selected" in rows[long_id].classes, "the curves shown are not the running job's"
        assert long_id in dom.by_id("curves-job").text()
        assert len(page.series_points(dom, "loss-curve")) >= 10
        assert len(page.series_points(dom, "accuracy-curve") or []) >= 3, "no accuracy curve"
        tasks = {page.cells(r)[0]: page.cells(r)[1] for r in dom.by_id("tasks").find("tbody").find_all("tr")}
        workers = {t: h for t, h in tasks.items() if "/job:worker/" in t}
        assert len(workers) == 2 and set(workers.values()) == {"up"}, tasks
        summary = " ".join(dom.by_id("summary").text().split())
        assert "2/2 tasks up" in summary and "1 running of 2 jobs" in summary, summary

        page.assert_no_console(shot_console)
        page.check_screenshot(path, 1280, 900)
    finally:
        cluster.stop()
