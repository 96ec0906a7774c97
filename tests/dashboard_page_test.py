#!/usr/bin/env python3
"""The web dashboard's page (master/dashboard/) on its own, in headless Chromium.

A small HTTP server of this test serves the page, script and style sheet as
the master does (the same paths and the same Content-Security-Policy) with a
fake /api/overview, and Debian's Chromium renders it: `--dump-dom` gives the
DOM after the page's script ran, `--screenshot` a PNG. The cases check what
each part of the page shows for a known overview (jobs, the selected job's
curves, tasks, the diagnosis, unknown values as "—"), that server text is
shown as text, that an empty or failing overview is handled, that the page
polls again and shows the newer overview, that it asks the server for
nothing but its own files, that the browser reports no error and no CSP
violation, and that a screenshot shows the header and the loss curve.

Also the helpers tests/dashboard_test.py uses against a real `weft local`:
Chromium, a small DOM built from the dumped HTML, and PNG reading.

Run with pytest (tests/dashboard_page_test.sh does, under Bazel):

    WEFT_DASHBOARD_DIR=master/dashboard python3 -m pytest -s tests/dashboard_page_test.py
"""
import html.parser
import http.server
import json
import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time
import zlib

CHROMIUM = os.environ.get("WEFT_CHROMIUM", "/usr/bin/chromium")
ASSET_DIR = os.environ.get("WEFT_DASHBOARD_DIR", "master/dashboard")
# What the master serves (master/dashboard.h), and how.
ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}
CSP = "default-src 'self'"
DASH = "\u2014"
CHROMIUM_TIMEOUT_S = 60  # one Chromium run; a healthy one takes a few seconds


# ---- Chromium ---------------------------------------------------------------


class Chromium:
    """Debian's headless Chromium, one process per page load."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.runs = 0

    def _run(self, url, extra, budget_ms):
        if not os.access(CHROMIUM, os.X_OK):
            raise AssertionError(
                "no Chromium at %s: install Debian's chromium package (make deps does)" % CHROMIUM)
        self.runs += 1
        profile = tempfile.mkdtemp(prefix="chromium-", dir=self.workdir)
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-default-apps", "--disable-extensions", "--mute-audio",
               "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0",
               "--virtual-time-budget=%d" % budget_ms] + extra + [url]
        try:
            p = subprocess.run(cmd, capture_output=True, timeout=CHROMIUM_TIMEOUT_S, cwd=self.workdir)
        except subprocess.TimeoutExpired as e:
            raise AssertionError("Chromium did not finish %s within %d s; its stderr:\n%s" %
                                 (url, CHROMIUM_TIMEOUT_S, (e.stderr or b"").decode(errors="replace")[-4000:]))
        finally:
            shutil.rmtree(profile, ignore_errors=True)
        err = p.stderr.decode(errors="replace")
        if p.returncode != 0:
            raise AssertionError("Chromium exited %d loading %s; its stderr:\n%s" % (p.returncode, url, err[-4000:]))
        return p.stdout.decode(errors="replace"), err

    def dump_dom(self, url, budget_ms=4000):
        """The DOM after `budget_ms` of the page's (virtual) time, and the
        console messages it logged."""
        out, err = self._run(url, ["--dump-dom"], budget_ms)
        return out, console_messages(err)

    def screenshot(self, url, path, width=1280, height=900, budget_ms=4000):
        _, err = self._run(url, ["--hide-scrollbars", "--window-size=%d,%d" % (width, height),
                                 "--screenshot=" + path], budget_ms)
        if not os.path.exists(path):
            raise AssertionError("Chromium wrote no screenshot to %s; its stderr:\n%s" % (path, err[-4000:]))
        return console_messages(err)


def console_messages(stderr):
    """What the page logged to its console (scripts' errors and CSP
    violations among them), from Chromium's --enable-logging output."""
    return [m.group(1) for m in re.finditer(r":CONSOLE[^\]]*\] (.*)", stderr)]


def dump_until(chromium, url, ready, deadline_s, what):
    """Loads `url` until `ready(dom)` holds (a page whose data is still
    coming), or fails after `deadline_s` naming `what` and the last DOM."""
    deadline = time.monotonic() + deadline_s
    while True:
        text, console = chromium.dump_dom(url)
        dom = parse_html(text)
        if ready(dom):
            return dom, console
        if time.monotonic() > deadline:
            raise AssertionError("within %d s the dashboard at %s never showed %s; the last DOM:\n%s" %
                                 (deadline_s, url, what, text[-6000:]))
        time.sleep(1)


# ---- A small DOM --------------------------------------------------------------


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag = tag
        self.attrs = dict(attrs)
        self.parent = parent
        self.children = []  # Node or str

    def get(self, name, default=None):
        return self.attrs.get(name, default)

    @property
    def classes(self):
        return (self.attrs.get("class") or "").split()

    def text(self):
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(self, tag=None, cls=None, **attrs):
        out = []
        for n in self.iter():
            if tag is not None and n.tag != tag:
                continue
            if cls is not None and cls not in n.classes:
                continue
            if any(n.attrs.get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            out.append(n)
        return out

    def find(self, tag=None, cls=None, **attrs):
        found = self.find_all(tag, cls, **attrs)
        return found[0] if found else None

    def by_id(self, id_):
        return self.find(id=id_)

    def __repr__(self):
        return "<%s %s>" % (self.tag, self.attrs)


class _Builder(html.parser.HTMLParser):
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.children.append(n)
        if tag not in self.VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def parse_html(text):
    b = _Builder()
    b.feed(text)
    b.close()
    return b.root


def page_ready(dom):
    body = dom.find("body")
    return body is not None and body.get("data-ready") == "1"


def job_rows(dom):
    table = dom.by_id("jobs")
    assert table is not None, "no table#jobs in the page"
    return [r for r in table.find("tbody").find_all("tr") if r.get("data-job") is not None]


def cells(row):
    return [c.text().strip() for c in row.children if isinstance(c, Node) and c.tag in ("th", "td")]


def series_points(dom, svg_id):
    """The points of the <path class="series"> in svg#`svg_id` (None if it
    has none), checked to lie inside the svg's viewBox."""
    svg = dom.by_id(svg_id)
    assert svg is not None, "no svg#%s in the page" % svg_id
    paths = svg.find_all("path", cls="series")
    if not paths:
        return None
    assert len(paths) == 1, "svg#%s has %d series paths" % (svg_id, len(paths))
    d = paths[0].get("d") or ""
    pts = [(float(x), float(y)) for x, y in re.findall(r"[ML]\s*(-?[\d.]+)[ ,](-?[\d.]+)", d)]
    assert pts and d.lstrip().startswith("M"), "svg#%s: bad path d=%r" % (svg_id, d)
    _, _, w, h = (float(v) for v in svg.get("viewbox").split())
    for x, y in pts:
        assert 0 <= x <= w and 0 <= y <= h, "svg#%s: point (%s, %s) outside its %sx%s viewBox" % (svg_id, x, y, w, h)
    return pts


# ---- PNG ------------------------------------------------------------------------


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA,
    non-interlaced PNG, which is what Chromium writes."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "%s is not a PNG" % path
    pos, idat, ihdr = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    width, height, depth, color, _, _, interlace = ihdr
    assert depth == 8 and color in (2, 6) and interlace == 0, "unexpected PNG format %s in %s" % (ihdr, path)
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev, pos = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[pos], bytearray(raw[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def count_near(rows, rgb, tol=40, region=None):
    x0, y0, x1, y1 = region or (0, 0, len(rows[0]), len(rows))
    return sum(1 for y in range(y0, y1) for px in rows[y][x0:x1]
               if abs(px[0] - rgb[0]) + abs(px[1] - rgb[1]) + abs(px[2] - rgb[2]) <= tol)


def check_screenshot(path, width, height):
    """A screenshot of the rendered dashboard: the size asked for, the dark
    header across the top, and the loss curve's colour (dashboard.css's
    --loss) drawn. Returns its rows."""
    w, h, rows = read_png(path)
    assert (w, h) == (width, height), "screenshot %s is %dx%d, not %dx%d" % (path, w, h, width, height)
    header = rows[5][5:w - 5:50]
    assert all(sum(px) < 150 for px in header), "no dark header across the top of %s: %s" % (path, header[:6])
    body_colours = len({px for row in rows[60::7] for px in row[::7]})
    assert body_colours > 50, "%s looks blank (%d colours)" % (path, body_colours)
    loss_pixels = count_near(rows, (0xE0, 0x66, 0x2F))
    assert loss_pixels > 300, "%s shows no loss curve (%d pixels of its colour)" % (path, loss_pixels)
    return rows


# ---- The fake master ------------------------------------------------------------


class FakeMaster:
    """Serves the dashboard's files as the master does, and /api/overview
    from `overview(n)` (n: how many overviews were asked for, from 1): a
    dict, or an int for an HTTP error. Records every path asked for."""

    def __init__(self, overview):
        self.overview = overview
        self.paths = []
        self.polls = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                with fake.lock:
                    fake.paths.append(self.path)
                path = self.path.split("?")[0]
                if path in ASSETS:
                    name, ctype = ASSETS[path]
                    with open(os.path.join(ASSET_DIR, name), "rb") as f:
                        self._send(200, ctype, f.read())
                elif path == "/api/overview":
                    with fake.lock:
                        fake.polls += 1
                        n = fake.polls
                    o = fake.overview(n)
                    if isinstance(o, int):
                        self._send(o, "text/plain", b"fake failure\n")
                    else:
                        self._send(200, "application/json", json.dumps(o).encode())
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _send(self, code, ctype, body):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Security-Policy", CSP)
                self.send_header("Cache-Control", "no-store")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def loss_at(step):
    return 2.3 * math.exp(-step / 300) + 0.3 + 0.04 * math.sin(step / 7)


def history(last_step, every=10, eval_every=400):
    return [{"step": s, "loss": loss_at(s),
             "accuracy": 0.6 + 0.25 * (1 - math.exp(-s / 500)) if s > 0 and s % eval_every == 0 else -1,
             "time_unix_ms": 1790000000000 + s * 40} for s in range(0, last_step + 1, every)]


RUNNING_ID = "job-2-00ab12cd34ef5679"
DIAGNOSIS = ("step 812 waits on worker:1: op dense_2/MatMul running 41 s; "
             "worker:0 waits for its all-reduce chunk from worker:1")


def full_overview():
    return {
        "time_unix_ms": 1790000000000,
        "master": {"address": "127.0.0.1:41234"},
        "tasks": [
            {"task": "/job:worker/task:0", "up": True, "draining": False, "graphs": 2,
             "devices": ["/job:worker/replica:0/task:0/device:CPU:0"],
             "step_time_p50_seconds": 0.012, "step_time_p99_seconds": 0.03, "straggler": False},
            {"task": "/job:worker/task:1", "up": True, "draining": True, "graphs": 2,
             "devices": ["/job:worker/replica:0/task:1/device:CPU:0"],
             "step_time_p50_seconds": 0.051, "step_time_p99_seconds": 0.3, "straggler": True},
            {"task": "/job:ps/task:0", "up": False, "error": "connection refused"},
        ],
        "jobs": [
            {"job_id": "job-1-00ab12cd34ef5678", "name": "mnist", "owner": "alice", "state": "SUCCEEDED",
             "step": 1000, "total_steps": 1000, "epoch": 3, "epochs": 3, "loss": 0.31, "test_accuracy": 0.871,
             "samples_per_second": 21000, "restarts": 0, "error": "", "diagnosis": "", "history": history(1000)},
            {"job_id": RUNNING_ID, "name": "fmnist-mlp", "owner": "bob", "state": "RUNNING",
             "step": 1290, "total_steps": 9370, "epoch": 2, "epochs": 10, "loss": 0.42, "test_accuracy": -1,
             "samples_per_second": 19876.5, "restarts": 1, "error": "", "diagnosis": "",
             "history": history(1290), "workers": ["/job:worker/task:0", "/job:worker/task:1"],
             "membership": [{"step": 640, "time_unix_ms": 1700000000000, "workers": 1, "seconds": 1.25,
                             "left": ["/job:worker/task:1"], "joined": [], "reason": "task <gone> unreachable"},
                            {"step": 900, "time_unix_ms": 1700000100000, "workers": 2, "seconds": 0.012,
                             "left": [], "joined": ["/job:worker/task:1"], "reason": ""}]},
            {"job_id": "job-3-00ab12cd34ef5670", "name": "<b>cnn</b>", "owner": "carol", "state": "FAILED",
             "step": 10, "total_steps": -1, "epoch": -1, "epochs": 0, "loss": None, "test_accuracy": -1,
             "samples_per_second": -1, "restarts": 3, "error": "worker /job:worker/task:1 lost: <too many> restarts",
             "diagnosis": "", "history": []},
        ],
        "diagnosis": DIAGNOSIS,
    }


# ---- The cases -------------------------------------------------------------------


def workdir():
    d = os.environ.get("TEST_TMPDIR") or tempfile.gettempdir()
    return tempfile.mkdtemp(prefix="dashboard-", dir=d)


def outputs_dir():
    return os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or workdir()


def load(overview, url_suffix="", budget_ms=4000):
    """Serves `overview` (a function of the poll count) and dumps the page."""
    with FakeMaster(overview) as fake:
        text, console = Chromium(workdir()).dump_dom(fake.url + url_suffix, budget_ms)
        paths = list(fake.paths)
        polls = fake.polls
    return parse_html(text), text, console, paths, polls


def assert_no_console(console):
    assert not console, "the page logged to its console (script errors, CSP violations):\n" + "\n".join(console)


def test_assets_are_self_contained():
    with open(os.path.join(ASSET_DIR, "index.html")) as f:
        page = f.read()
    with open(os.path.join(ASSET_DIR, "dashboard.js")) as f:
        script = f.read()
    with open(os.path.join(ASSET_DIR, "dashboard.css")) as f:
        style = f.read()
    for name, text in (("index.html", page), ("dashboard.js", script), ("dashboard.css", style)):
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, "%s refers to other sites, which the dashboard must not fetch from: %s" % (name, urls)
        assert "@import" not in text, "%s imports a style sheet" % name
    assert not re.search(r"\sstyle\s*=", page), "index.html has a style attribute, which the CSP blocks"
    assert not re.search(r"<style", page), "index.html has a <style> element, which the CSP blocks"
    assert not re.search(r"\son[a-z]+\s*=", page), "index.html has an inline event handler, which the CSP blocks"
    for m in re.finditer(r"<script([^>]*)>(.*?)</script>", page, re.S):
        assert "src=" in m.group(1) and not m.group(2).strip(), "index.html has an inline script, which the CSP blocks"
    # Server text only ever becomes text nodes.
    for bad in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                'setAttribute("style"', ".style."):
        assert bad not in script, "dashboard.js uses %s" % bad


def test_renders_the_overview():
    dom, text, console, paths, polls = load(lambda n: full_overview())
    assert page_ready(dom), "body[data-ready] never became 1:\n" + text[-3000:]
    assert_no_console(console)

    # The header's summary.
    summary = re.sub(r"\s+", " ", dom.by_id("summary").text())
    assert "127.0.0.1:41234" in summary and "2/3 tasks up" in summary and "1 running of 3 jobs" in summary, summary

    # The jobs, in the overview's order, each with its values; unknown ones as "—".
    rows = job_rows(dom)
    assert [r.get("data-job") for r in rows] == [j["job_id"] for j in full_overview()["jobs"]]
    done, running, failed = (cells(r) for r in rows)
    assert done[:4] == ["job-1-00ab12cd34ef5678", "mnist", "alice", "succeeded"], done
    assert done[5:] == ["3 / 3", "0.3100", "87.10 %", "21.0 k", "0"], done
    assert running[:4] == [RUNNING_ID, "fmnist-mlp", "bob", "running"], running
    assert running[4].startswith("1,290 / 9,370") and running[4].endswith("13 %"), running
    assert running[5:] == ["2 / 10", "0.4200", DASH, "19.9 k", "1"], running
    assert failed[1] == "<b>cnn</b>" and failed[3] == "failed", failed  # text, not markup
    assert failed[4:] == ["10", DASH, DASH, DASH, DASH, "3"], failed
    progress = rows[1].find("progress")
    assert progress is not None and progress.get("max") == "9370" and progress.get("value") == "1290"
    jobs_table = dom.by_id("jobs")
    assert not jobs_table.find_all("b"), "a job's name was rendered as markup"
    errors = jobs_table.find_all("tr", cls="error-row")
    assert len(errors) == 1 and errors[0].text() == "worker /job:worker/task:1 lost: <too many> restarts"
    assert dom.by_id("jobs-empty").get("hidden") is not None

    # The curves are the newest running job's: every loss point, and the
    # evaluated accuracy points only (-1: not evaluated).
    assert "selected" in rows[1].classes and "selected" not in rows[0].classes
    assert RUNNING_ID in dom.by_id("curves-job").text()
    hist = history(1290)
    loss = series_points(dom, "loss-curve")
    assert loss is not None and len(loss) == len(hist), "%s loss points drawn of %d" % (loss and len(loss), len(hist))
    xs = [x for x, _ in loss]
    assert xs == sorted(xs) and xs[-1] - xs[0] > 300, "the loss curve does not run left to right across the chart"
    # Loss falls: the first point is drawn higher (smaller y) than the last.
    assert loss[0][1] < loss[-1][1], "the loss curve is upside down"
    acc = series_points(dom, "accuracy-curve")
    assert acc is not None and len(acc) == len([p for p in hist if p["accuracy"] >= 0]) == 3, acc
    assert acc[0][1] > acc[-1][1], "the accuracy curve is upside down"
    assert dom.by_id("loss-latest").text() == "%.4f at step 1,290" % loss_at(1290)
    assert dom.by_id("accuracy-latest").text() == "82.73 % at step 1,200"

    # The selected (elastic) job's workers and each change of them, oldest
    # first; the reason as text.
    assert dom.by_id("membership-workers").text() == "2 now: /job:worker/task:0, /job:worker/task:1"
    changes = dom.by_id("membership").find_all("li")
    assert len(changes) == 2, [c.text() for c in changes]
    first = re.sub(r"\s+", " ", changes[0].text())
    assert "step 640: 1 worker(s) after 1.25 s; left: /job:worker/task:1 (task <gone> unreachable)" in first, first
    assert not dom.by_id("membership").find_all("gone"), "a reason was rendered as markup"
    second = re.sub(r"\s+", " ", changes[1].text())
    assert "step 900: 2 worker(s) after 12.0 ms; joined: /job:worker/task:1" in second, second
    assert dom.by_id("membership-empty").get("hidden") is not None

    # The tasks.
    task_rows = dom.by_id("tasks").find("tbody").find_all("tr")
    t0, t1, ps = (cells(r) for r in task_rows)
    assert t0 == ["/job:worker/task:0", "up", "no", "2", "CPU:0", "12.0 ms", "30.0 ms", "no"], t0
    assert t1 == ["/job:worker/task:1", "up", "draining", "2", "CPU:0", "51.0 ms", "300.0 ms", "straggler"], t1
    assert ps == ["/job:ps/task:0", "down", DASH, DASH, DASH, DASH, DASH, DASH], ps
    assert task_rows[2].find("span", cls="badge").get("title") == "connection refused"
    assert task_rows[1].find_all("span", cls="bad")[0].text() == "straggler"

    # The diagnosis, highlighted.
    diag = dom.by_id("diagnosis")
    assert diag.text() == DIAGNOSIS and "none" not in diag.classes
    assert "active" in diag.parent.classes

    # Nothing but its own files and the overview; favicon.ico is the browser's.
    allowed = set(ASSETS) | {"/api/overview", "/favicon.ico"}
    assert set(paths) <= allowed, "the page asked for %s" % (set(paths) - allowed)
    assert {"/", "/dashboard.js", "/dashboard.css", "/api/overview"} <= set(paths), paths


def test_job_in_the_address_is_plotted():
    dom, text, console, _, _ = load(lambda n: full_overview(), "#job=job-1-00ab12cd34ef5678")
    assert page_ready(dom), text[-3000:]
    assert_no_console(console)
    rows = job_rows(dom)
    assert "selected" in rows[0].classes and "selected" not in rows[1].classes
    assert len(series_points(dom, "loss-curve")) == len(history(1000))
    # A job with no history: an empty chart that says so, no series.
    dom, text, console, _, _ = load(lambda n: full_overview(), "#job=job-3-00ab12cd34ef5670")
    assert_no_console(console)
    assert series_points(dom, "loss-curve") is None
    assert dom.by_id("loss-curve").find("text", cls="no-data").text() == "no loss reported yet"


def test_newest_job_when_none_runs():
    def overview(n):
        o = full_overview()
        o["jobs"] = [j for j in o["jobs"] if j["state"] != "RUNNING"]
        return o
    dom, _, console, _, _ = load(overview)
    assert_no_console(console)
    rows = job_rows(dom)
    assert [r.get("data-job") for r in rows if "selected" in r.classes] == ["job-3-00ab12cd34ef5670"]
    # A job that is not elastic: no workers line, no changes, the note shown.
    assert dom.by_id("membership-workers").text() == ""
    assert not dom.by_id("membership").find_all("li")
    assert dom.by_id("membership-empty").get("hidden") is None


def test_refreshes_itself():
    # Each poll sees the job 100 steps further on.
    def overview(n):
        o = full_overview()
        job = o["jobs"][1]
        job["step"] = 1000 + 100 * n
        job["history"] = history(job["step"])
        return o
    dom, text, console, _, polls = load(overview, budget_ms=7000)
    assert_no_console(console)
    assert polls >= 3, "the page polled /api/overview %d times in 7 s (every 2 s expected)" % polls
    step = int(cells(job_rows(dom)[1])[4].split(" / ")[0].replace(",", ""))
    assert step >= 1200, "the page still shows step %d, from its first poll" % step
    assert len(series_points(dom, "loss-curve")) == step // 10 + 1


def test_accuracy_carried_forward_is_one_evaluation():
    # Points after an evaluation may repeat its accuracy until the next one.
    def overview(n):
        o = full_overview()
        hist = o["jobs"][1]["history"]
        acc = -1
        for p in hist:
            acc = p["accuracy"] if p["accuracy"] >= 0 else acc
            p["accuracy"] = acc
        return o
    dom, _, console, _, _ = load(overview)
    assert_no_console(console)
    assert len(series_points(dom, "accuracy-curve")) == 3
    assert dom.by_id("accuracy-latest").text() == "82.73 % at step 1,200"


def test_sparse_overview():
    # Only what must be there: every other field missing.
    def overview(n):
        return {"tasks": [{"task": "/job:worker/task:0", "up": True}],
                "jobs": [{"job_id": "job-7-0000000000000000", "state": "PENDING"},
                         {"job_id": "job-8-0000000000000000", "state": "RUNNING",
                          "history": [{"step": 5, "loss": 1.5}, {"step": 7, "loss": None}]}]}
    dom, text, console, _, _ = load(overview)
    assert page_ready(dom), text[-3000:]
    assert_no_console(console)
    pending, running = (cells(r) for r in job_rows(dom))
    assert pending == ["job-7-0000000000000000", DASH, DASH, "pending", DASH, DASH, DASH, DASH, DASH, DASH], pending
    assert running[3] == "running"
    assert len(series_points(dom, "loss-curve")) == 1  # null (NaN at the master) is no point
    assert series_points(dom, "accuracy-curve") is None
    assert cells(dom.by_id("tasks").find("tbody").find("tr")) == [
        "/job:worker/task:0", "up", DASH, DASH, DASH, DASH, DASH, DASH]
    assert "none" in dom.by_id("diagnosis").classes


def test_empty_cluster():
    dom, text, console, _, _ = load(lambda n: {"time_unix_ms": 1790000000000, "master": {"address": "m:1"},
                                               "tasks": [], "jobs": [], "diagnosis": ""})
    assert page_ready(dom), text[-3000:]
    assert_no_console(console)
    assert job_rows(dom) == []
    assert dom.by_id("jobs-empty").get("hidden") is None
    assert dom.by_id("tasks-empty").get("hidden") is None
    assert series_points(dom, "loss-curve") is None
    assert dom.by_id("loss-curve").find("text", cls="no-data").text() == "no jobs yet"


def test_master_failing():
    # Errors, then an overview: the page says so, keeps polling and recovers.
    dom, text, _, _, polls = load(lambda n: 503, budget_ms=3000)
    assert not page_ready(dom)
    updated = dom.by_id("updated")
    assert "HTTP 503" in updated.text() and "stale" in updated.classes, updated.text()
    assert polls >= 2
    dom, text, _, _, polls = load(lambda n: 500 if n < 3 else full_overview(), budget_ms=7000)
    assert page_ready(dom), "the page did not recover after %d polls:\n%s" % (polls, text[-3000:])
    assert "stale" not in dom.by_id("updated").classes
    assert len(job_rows(dom)) == 3


def test_screenshot():
    path = os.path.join(outputs_dir(), "dashboard_page.png")
    with FakeMaster(lambda n: full_overview()) as fake:
        console = Chromium(workdir()).screenshot(fake.url, path)
    assert_no_console(console)
    check_screenshot(path, 1280, 900)
    print("screenshot: " + path)
