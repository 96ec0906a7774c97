"""Seeing inside a running job, as a user would, with real parts.

Prometheus: a real Prometheus scrapes a `weft local` cluster over mTLS.

`weft local --metrics_port=0` starts a master and two workers, each serving
/metrics over HTTPS that requires a client certificate; Prometheus (Debian's
package) scrapes them every second with the local cluster's admin
certificate while a MULTI_WORKER_MIRRORED job trains on Fashion-MNIST. The
test asks Prometheus' HTTP API, as a user would, that every target is up,
that weft_steps_total rises while the job runs, that the workers served
RunGraph calls, and that the master sees both tasks up. Every wait has a
deadline; nothing is timed.

Trace: `weft trace JOB --steps=3` against a running MULTI_WORKER_MIRRORED
job writes one Chrome trace-event file with spans of both workers for every
traced step, kernels inside their RunGraph call, and the master's dispatch.
"""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

WEFT = os.environ["WEFT"]
PROMETHEUS = "/usr/bin/prometheus"
DATA = "/usr/share/datasets/fashion-mnist"
JOB = """
name: "prom-mwm"
model {
  input_shape: [784]
  num_classes: 10
  layer { dense { units: 64 activation: RELU } }
  layer { dense { units: 10 } }
}
dataset { format: IDX dir: "%s" scale: 255 }
optimizer { adam { learning_rate: 0.001 } }
batch_size: 64
epochs: 8
seed: 1
intra_op_threads: 1
# One step per dispatch keeps the job running long enough to be scraped
# (the default, 0, runs this small model many steps per dispatch).
strategy { kind: MULTI_WORKER_MIRRORED steps_per_execution: 1 }
""" % DATA


def wait_for(what, fn, timeout, interval=0.2):
    """Polls fn() until it returns a true value, up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def read_port(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


class Prometheus:
    """Debian's Prometheus on a loopback port; retried on a port in use."""

    def __init__(self, work, targets, tls_dir):
        self.work = work
        cfg = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
            "scrape_configs": [{
                "job_name": "weft",
                "scheme": "https",
                "tls_config": {
                    "ca_file": f"{tls_dir}/ca.crt",
                    "cert_file": f"{tls_dir}/local.crt",
                    "key_file": f"{tls_dir}/local.key",
                },
                "static_configs": [{"targets": targets}],
            }],
        }
        self.config = os.path.join(work, "prometheus.yml")
        with open(self.config, "w") as f:
            json.dump(cfg, f)  # JSON is YAML
        self.proc = None
        for _ in range(8):
            self.port = random.randint(20000, 60000)
            log = open(os.path.join(work, "prometheus.log"), "w")
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={self.config}", f"--storage.tsdb.path={work}/tsdb",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=info"],
                stdout=log, stderr=subprocess.STDOUT)
            if self._ready():
                return
            self.stop()
        raise AssertionError("Prometheus did not start; see " + os.path.join(work, "prometheus.log"))

    def _ready(self):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False  # the port was taken, most likely: try another
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.2)
        return False

    def query(self, q):
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def cluster():
    if not os.path.isdir(DATA):
        pytest.fail(f"{DATA} is missing: Debian's dataset-fashion-mnist (make deps installs it)")
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail(f"{PROMETHEUS} is missing: Debian's prometheus package (make deps installs it)")
    work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    job = os.path.join(work, "job.pbtxt")
    with open(job, "w") as f:
        f.write(JOB)
    logs = os.path.join(work, "logs")
    os.mkdir(logs, 0o700)
    out = open(os.path.join(work, "weft-local.out"), "w")
    proc = subprocess.Popen(
        [WEFT, "local", "--workers=2", f"--log_dir={logs}", "--metrics_port=0",
         f"--checkpoint_root={work}/ckpt", job], stdout=out, stderr=subprocess.STDOUT)
    yield proc, logs, work
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def value(result):
    return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_a_running_job(cluster):
    proc, logs, work = cluster
    names = ["master-0", "worker-0", "worker-1"]
    ports = {}
    for n in names:
        ports[n] = wait_for(f"{n}'s metrics port file", lambda: read_port(f"{logs}/{n}.metrics_port"), 120)
    targets = [f"127.0.0.1:{ports[n]}" for n in names]
    prom = Prometheus(work, targets, f"{logs}/tls")
    try:
        # Every daemon is scraped over mTLS with the admin certificate.
        def all_up():
            r = prom.query("up")
            return len(r) == 3 and all(x["value"][1] == "1" for x in r) and r
        wait_for("all three targets up", all_up, 60)

        # Steps rise while the job runs (two readings, the second larger).
        first = wait_for("a first weft_steps_total > 0",
                         lambda: (value(prom.query("sum(weft_steps_total)")) or 0) > 0 and
                         value(prom.query("sum(weft_steps_total)")), 120)
        wait_for("weft_steps_total to rise", lambda: value(prom.query("sum(weft_steps_total)")) > first, 60)
        assert proc.poll() is None, "the job ended before the rise was seen"

        # The workers served RunGraph; the master sees both tasks up; the
        # allocators report their bytes; step durations are observed.
        wait_for("RunGraph counted on both workers", lambda: len(prom.query(
            'weft_grpc_server_handled_total{grpc_method="RunGraph",grpc_code="OK"} > 0')) == 2, 30)
        assert value(prom.query("count(weft_task_up == 1)")) == 2
        assert value(prom.query("count(weft_allocator_bytes_in_use)")) >= 2
        assert value(prom.query("sum(weft_step_duration_seconds_count)")) > 0
        assert value(prom.query("max(weft_loss)")) > 0
    finally:
        prom.stop()
    rc = wait_for_exit(proc, 600)
    with open(os.path.join(work, "weft-local.out")) as f:
        out = f.read()
    assert rc == 0, out[-4000:]
    assert "SUCCEEDED" in out, out[-4000:]


def test_trace_of_a_running_job(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)
    job = tmp_path / "job.pbtxt"
    job.write_text(JOB.replace("epochs: 8", "epochs: 30"))
    local = subprocess.Popen([WEFT, "local", "--workers=2", f"--log_dir={logs}", f"--checkpoint_root={tmp_path}/ckpt"],
                             stdout=open(tmp_path / "local.out", "w"), stderr=subprocess.STDOUT)
    try:
        port = wait_for("the master's port", lambda: read_port(f"{logs}/master-0.port"), 120)
        env = dict(os.environ, WEFT_MASTER=f"127.0.0.1:{port}", WEFT_CA=f"{logs}/tls/ca.crt",
                   WEFT_CERT=f"{logs}/tls/local.crt", WEFT_KEY=f"{logs}/tls/local.key")
        # The cluster is up once the master lists both workers' devices.
        wait_for("both workers' devices", lambda: subprocess.run(
            [WEFT, "devices"], env=env, capture_output=True, text=True).stdout.count("CPU") >= 2, 120)
        submit = subprocess.run([WEFT, "submit", str(job)], env=env, capture_output=True, text=True, timeout=60)
        assert submit.returncode == 0, submit.stderr
        job_id = submit.stdout.strip().split()[-1]
        def running():
            st = subprocess.run([WEFT, "status", job_id, "--output=json"], env=env, capture_output=True, text=True)
            if st.returncode != 0:
                return False
            status = json.loads(st.stdout)
            return status.get("state") == "RUNNING" and int(status.get("steps", 0)) > 0
        wait_for("the job to run steps", running, 120)
        out = tmp_path / "trace.json"
        t = subprocess.run([WEFT, "trace", job_id, "--steps=3", f"--out={out}"], env=env, capture_output=True,
                           text=True, timeout=120)
        assert t.returncode == 0, t.stderr
        doc = json.loads(out.read_text())
        events = doc["traceEvents"]
        procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
        spans = [e for e in events if e["ph"] == "X"]
        by_task = {}
        for e in spans:
            by_task.setdefault(procs[e["pid"]], []).append(e)
        tasks = {"/job:worker/task:0", "/job:worker/task:1"}
        assert tasks <= set(by_task), procs
        steps = {e["args"]["step"] for e in by_task["/job:worker/task:0"] if e["cat"] == "kernel"}
        assert len(steps) == 3, steps
        for task in tasks:
            mine = by_task[task]
            for step in steps:
                run = [e for e in mine if e["cat"] == "step" and e["args"]["step"] == step]
                kernels = [e for e in mine if e["cat"] == "kernel" and e["args"]["step"] == step]
                assert len(run) == 1, (task, step)
                ops = {e["args"]["op"] for e in kernels}
                assert {"MatMul", "CollectiveAllReduce"} <= ops, (task, step, ops)
                # Kernels inside their RunGraph call, give or take the
                # clock alignment (same host: well under a millisecond).
                r = run[0]
                for k in kernels:
                    assert k["ts"] >= r["ts"] - 1000 and k["ts"] + k["dur"] <= r["ts"] + r["dur"] + 1000, (k, r)
        assert any(e["cat"] == "dispatch" for e in by_task["master (dispatch)"])
        assert "3 step(s)" in t.stderr
    finally:
        local.send_signal(signal.SIGINT)
        try:
            local.wait(timeout=60)
        except subprocess.TimeoutExpired:
            local.kill()
            local.wait()


def wait_for_exit(proc, timeout):
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"weft local still running after {timeout} s")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
