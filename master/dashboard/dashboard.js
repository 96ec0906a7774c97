// weft's web dashboard: polls the master's api/overview every 2 s and renders
// the cluster summary, the jobs, the selected job's loss and accuracy curves
// (inline SVG), the cluster's tasks and the latest diagnosis.
//
// Plain DOM APIs only, no libraries, nothing fetched but api/overview (the
// page is served under `Content-Security-Policy: default-src 'self'`, so
// there are no inline scripts or style attributes either). When the first
// overview has been rendered, document.body.dataset.ready is "1".
//
// The overview (master/dashboard.h): {time_unix_ms, master: {address},
// tasks: [{task, up, error, draining, graphs, devices, step_time_p50_seconds,
// step_time_p99_seconds, straggler}], jobs: [{job_id, name, owner, state,
// step, total_steps, epoch, epochs, loss, test_accuracy, samples_per_second,
// restarts, error, diagnosis, history: [{step, loss, accuracy,
// time_unix_ms}], workers: [task], membership: [{step, time_unix_ms,
// workers, seconds, left: [task], joined: [task], reason}]}], diagnosis}. Any number may be missing, null or -1
// (unknown): it shows as "—".
(function () {
  "use strict";

  const POLL_MS = 2000;
  const FETCH_TIMEOUT_MS = 5000;
  const DASH = "\u2014";
  const SVG_NS = "http://www.w3.org/2000/svg";

  // The job whose curves are shown, chosen by the user (a click on its id,
  // or the page's address ending in #job=ID); null: automatic (the newest
  // running job, else the newest job).
  let chosenJobId = jobInHash();
  let lastOverview = null;

  function jobInHash() {
    const m = /^#job=(.+)$/.exec(window.location.hash);
    if (!m) return null;
    try {
      return decodeURIComponent(m[1]);
    } catch (e) {
      return null;
    }
  }

  // ---- Values and formatting ------------------------------------------------

  // A number that is present and not "unknown" (-1, or any negative: none of
  // the overview's quantities can be negative).
  function known(v) {
    return typeof v === "number" && isFinite(v) && v >= 0;
  }

  function fmtInt(v) {
    return known(v) ? Math.round(v).toLocaleString("en-US") : DASH;
  }

  function fmtLoss(v) {
    if (!known(v)) return DASH;
    if (v >= 1000) return v.toExponential(2);
    if (v >= 100) return v.toFixed(1);
    return v.toFixed(4);
  }

  function fmtAccuracy(v) {
    return known(v) ? (v * 100).toFixed(2) + " %" : DASH;
  }

  function fmtRate(v) {
    if (!known(v)) return DASH;
    if (v >= 1e6) return (v / 1e6).toFixed(2) + " M";
    if (v >= 1e4) return (v / 1e3).toFixed(1) + " k";
    return Math.round(v).toLocaleString("en-US");
  }

  function fmtSeconds(v) {
    if (!known(v)) return DASH;
    if (v < 1e-3) return (v * 1e6).toFixed(0) + " \u00b5s";
    if (v < 1) return (v * 1e3).toFixed(v < 0.01 ? 2 : 1) + " ms";
    if (v < 120) return v.toFixed(2) + " s";
    return (v / 60).toFixed(1) + " min";
  }

  function fmtClock(ms) {
    if (!known(ms)) return DASH;
    const d = new Date(ms);
    const pad = (n) => String(n).padStart(2, "0");
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  function str(v) {
    return typeof v === "string" && v !== "" ? v : DASH;
  }

  // The sequence number in a job id "job-<n>-<hex>", which orders jobs by
  // submission; -1 if the id is not of that form.
  function jobSeq(id) {
    const m = /^job-(\d+)(?:-|$)/.exec(typeof id === "string" ? id : "");
    return m ? Number(m[1]) : -1;
  }

  // ---- DOM helpers ----------------------------------------------------------

  function h(tag, attrs, children) {
    const e = document.createElement(tag);
    setAttrs(e, attrs);
    append(e, children);
    return e;
  }

  function s(tag, attrs, children) {
    const e = document.createElementNS(SVG_NS, tag);
    setAttrs(e, attrs);
    append(e, children);
    return e;
  }

  function setAttrs(e, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      e.setAttribute(k, v === true ? "" : String(v));
    }
  }

  function append(e, children) {
    if (children === undefined || children === null) return;
    for (const c of Array.isArray(children) ? children : [children]) {
      if (c === undefined || c === null) continue;
      e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
  }

  function byId(id) {
    return document.getElementById(id);
  }

  function badge(text, kind, title) {
    return h("span", { class: "badge " + kind, title: title }, text);
  }

  // ---- Summary and diagnosis ------------------------------------------------

  function renderSummary(o, tasks, jobs) {
    const up = tasks.filter((t) => t.up === true).length;
    const running = jobs.filter((j) => j.state === "RUNNING" || j.state === "RECOVERING").length;
    const master = o.master && typeof o.master.address === "string" ? o.master.address : DASH;
    const parts = [
      h("span", { class: "item" }, ["master ", h("strong", null, master)]),
      h("span", { class: "item" + (up < tasks.length ? " warn" : "") }, [
        h("strong", null, up + "/" + tasks.length), " tasks up",
      ]),
      h("span", { class: "item" }, [h("strong", null, String(running)), " running of ",
        h("strong", null, String(jobs.length)), jobs.length === 1 ? " job" : " jobs"]),
    ];
    byId("summary").replaceChildren(...parts);
    const updated = byId("updated");
    updated.textContent = "updated " + fmtClock(known(o.time_unix_ms) ? o.time_unix_ms : Date.now());
    updated.classList.remove("stale");
  }

  function renderDiagnosis(o, selected) {
    const p = byId("diagnosis");
    let text = typeof o.diagnosis === "string" ? o.diagnosis : "";
    let source = "";
    if (!text && selected && typeof selected.diagnosis === "string" && selected.diagnosis) {
      text = selected.diagnosis;
      source = selected.job_id;
    }
    if (text) {
      p.replaceChildren(...(source ? [h("span", { class: "source" }, source + ": "), text] : [text]));
      p.classList.remove("none");
      p.closest(".card").classList.add("active");
    } else {
      p.textContent = "none: no step is stuck";
      p.classList.add("none");
      p.closest(".card").classList.remove("active");
    }
  }

  // ---- Jobs -------------------------------------------------------------------

  function stateBadge(state, error) {
    const kinds = {
      RUNNING: "running", RECOVERING: "warn", PENDING: "pending", SUCCEEDED: "ok",
      FAILED: "bad", CANCELLED: "muted", PREEMPTED: "warn",
    };
    const st = typeof state === "string" && state ? state : "UNKNOWN";
    return badge(st.toLowerCase(), kinds[st] || "muted", error || undefined);
  }

  function progressCell(j) {
    const total = known(j.total_steps) && j.total_steps > 0 ? j.total_steps : null;
    const step = known(j.step) ? j.step : null;
    if (total === null) return h("td", null, step === null ? DASH : fmtInt(step));
    const frac = Math.min(1, (step || 0) / total);
    const label = fmtInt(step) + " / " + fmtInt(total);
    return h("td", { class: "progress-cell" }, [
      h("progress", { max: total, value: Math.min(step || 0, total), "aria-label": "step " + label }),
      h("span", { class: "progress-text" }, [label, h("span", { class: "pct" }, " " + Math.floor(frac * 100) + " %")]),
    ]);
  }

  function epochText(j) {
    if (!known(j.epoch)) return DASH;
    if (known(j.epochs) && j.epochs > 0) return Math.min(j.epoch, j.epochs) + " / " + j.epochs;
    return String(j.epoch);
  }

  function renderJobs(jobs, selectedId) {
    const table = byId("jobs");
    const focused = document.activeElement && document.activeElement.dataset
      ? document.activeElement.dataset.job : undefined;
    const rows = jobs.map((j) => {
      const selected = j.job_id === selectedId;
      const button = h("button", {
        type: "button", class: "job-link", "data-job": j.job_id, "aria-pressed": selected ? "true" : "false",
        title: "Plot this job's curves",
      }, str(j.job_id));
      button.addEventListener("click", () => {
        chosenJobId = j.job_id;
        history.replaceState(null, "", "#job=" + encodeURIComponent(j.job_id));
        if (lastOverview) render(lastOverview);
      });
      const row = h("tr", { class: selected ? "selected" : undefined, "data-job": j.job_id }, [
        h("th", { scope: "row" }, button),
        h("td", null, str(j.name)),
        h("td", null, str(j.owner)),
        h("td", null, stateBadge(j.state, j.error)),
        progressCell(j),
        h("td", { class: "num" }, epochText(j)),
        h("td", { class: "num" }, fmtLoss(j.loss)),
        h("td", { class: "num" }, fmtAccuracy(j.test_accuracy)),
        h("td", { class: "num" }, fmtRate(j.samples_per_second)),
        h("td", { class: "num" + (known(j.restarts) && j.restarts > 0 ? " warn-text" : "") }, fmtInt(j.restarts)),
      ]);
      const out = [row];
      if (typeof j.error === "string" && j.error) {
        out.push(h("tr", { class: "error-row" }, [h("td", { colspan: 10 }, j.error)]));
      }
      return out;
    }).flat();
    table.tBodies[0].replaceChildren(...rows);
    byId("jobs-empty").hidden = jobs.length > 0;
    if (focused) {
      const again = table.querySelector('button[data-job="' + CSS.escape(focused) + '"]');
      if (again) again.focus();
    }
  }

  // The job whose curves are shown: the user's choice while it exists, else
  // the newest running (or recovering) job, else the newest job.
  function selectJob(jobs) {
    if (chosenJobId !== null) {
      const chosen = jobs.find((j) => j.job_id === chosenJobId);
      if (chosen) return chosen;
      chosenJobId = null;
    }
    const newest = (list) => list.reduce((best, j, i) => {
      const key = [jobSeq(j.job_id), i];
      return best === null || key[0] > best.key[0] || (key[0] === best.key[0] && key[1] > best.key[1])
        ? { job: j, key: key } : best;
    }, null);
    const running = newest(jobs.filter((j) => j.state === "RUNNING" || j.state === "RECOVERING"));
    if (running) return running.job;
    const any = newest(jobs);
    return any ? any.job : null;
  }

  // ---- Curves -------------------------------------------------------------------

  // About `count` round tick values covering [lo, hi].
  function niceTicks(lo, hi, count) {
    const span = hi - lo;
    const raw = span / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / mag;
    const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    return { ticks: ticksOf(lo, hi, step), step: step };
  }

  function ticksOf(lo, hi, step) {
    const ticks = [];
    for (let i = Math.ceil(lo / step - 1e-9); i * step <= hi + step * 1e-9; i++) ticks.push(i * step);
    return ticks;
  }

  function tickLabel(v, step, percent) {
    if (percent) {
      const digits = Math.max(0, -Math.floor(Math.log10(step * 100)));
      return (v * 100).toFixed(digits) + "%";
    }
    if (Math.abs(v) >= 10000) return (v / 1000).toLocaleString("en-US", { maximumFractionDigits: 1 }) + "k";
    const digits = Math.max(0, -Math.floor(Math.log10(step)));
    return v.toFixed(Math.min(digits, 6));
  }

  // Draws `points` ([{x, y}], x ascending) into `svg` as a line with axes.
  function drawCurve(svg, points, opts) {
    const vb = svg.viewBox.baseVal;
    const W = vb && vb.width ? vb.width : 560;
    const H = vb && vb.height ? vb.height : 230;
    const m = { left: 58, right: 18, top: 14, bottom: 36 };
    const pw = W - m.left - m.right;
    const ph = H - m.top - m.bottom;
    const nodes = [];
    if (opts.latest) opts.latest.textContent = "";
    if (points.length === 0) {
      nodes.push(s("rect", { class: "plot-bg", x: m.left, y: m.top, width: pw, height: ph }));
      nodes.push(s("text", { class: "no-data", x: m.left + pw / 2, y: m.top + ph / 2, "text-anchor": "middle" },
        opts.empty));
      svg.replaceChildren(...nodes);
      return;
    }
    let x0 = points[0].x;
    let x1 = points[points.length - 1].x;
    if (x1 <= x0) { x0 -= 1; x1 += 1; }
    let y0 = Math.min(...points.map((p) => p.y));
    let y1 = Math.max(...points.map((p) => p.y));
    // Some headroom, then out to whole ticks; never below 0 (nor, for
    // accuracy, above 100 %).
    const pad = Math.max((y1 - y0) * 0.08, opts.percent ? 0.01 : Math.abs(y1) * 0.02, 1e-6);
    y0 = Math.max(0, y0 - pad);
    y1 = opts.percent ? Math.min(1, y1 + pad) : y1 + pad;
    const yStep = niceTicks(y0, y1, 4).step;
    y0 = Math.max(0, Math.floor(y0 / yStep + 1e-9) * yStep);
    y1 = Math.ceil(y1 / yStep - 1e-9) * yStep;
    if (opts.percent) y1 = Math.min(1, y1);
    const yTicks = { ticks: ticksOf(y0, y1, yStep), step: yStep };
    const xTicks = niceTicks(x0, x1, 6);
    const X = (x) => m.left + (x - x0) / (x1 - x0) * pw;
    const Y = (y) => m.top + ph - (y - y0) / (y1 - y0) * ph;

    nodes.push(s("rect", { class: "plot-bg", x: m.left, y: m.top, width: pw, height: ph }));
    for (const t of yTicks.ticks) {
      if (t < y0 - 1e-12 || t > y1 + 1e-12) continue;
      const y = Y(t).toFixed(1);
      nodes.push(s("line", { class: "grid", x1: m.left, x2: m.left + pw, y1: y, y2: y }));
      nodes.push(s("text", { class: "tick", x: m.left - 8, y: y, "text-anchor": "end", "dominant-baseline": "middle" },
        tickLabel(t, yTicks.step, opts.percent)));
    }
    for (const t of xTicks.ticks) {
      if (t < x0 || t > x1) continue;
      const x = X(t).toFixed(1);
      nodes.push(s("line", { class: "grid vertical", x1: x, x2: x, y1: m.top, y2: m.top + ph }));
      nodes.push(s("text", { class: "tick", x: x, y: m.top + ph + 16, "text-anchor": "middle" },
        tickLabel(t, xTicks.step, false)));
    }
    nodes.push(s("line", { class: "axis", x1: m.left, x2: m.left + pw, y1: m.top + ph, y2: m.top + ph }));
    nodes.push(s("line", { class: "axis", x1: m.left, x2: m.left, y1: m.top, y2: m.top + ph }));
    nodes.push(s("text", { class: "axis-label", x: m.left + pw, y: H - 4, "text-anchor": "end" }, "step"));

    const d = points.map((p, i) => (i === 0 ? "M" : "L") + X(p.x).toFixed(1) + " " + Y(p.y).toFixed(1)).join(" ");
    nodes.push(s("path", { class: "series", d: d }));
    if (points.length <= 40) {  // sparse (evaluations): mark each point
      for (const p of points) {
        nodes.push(s("circle", { class: "point", cx: X(p.x).toFixed(1), cy: Y(p.y).toFixed(1), r: 2.5 }));
      }
    }
    const last = points[points.length - 1];
    nodes.push(s("circle", { class: "last", cx: X(last.x).toFixed(1), cy: Y(last.y).toFixed(1), r: 3.5 },
      s("title", null, "step " + fmtInt(last.x) + ": " + opts.format(last.y))));
    svg.replaceChildren(...nodes);
    if (opts.latest) opts.latest.textContent = opts.format(last.y) + " at step " + fmtInt(last.x);
  }

  // The points of a history field, finite and not unknown, by ascending step.
  function series(history, field) {
    const pts = [];
    for (const p of Array.isArray(history) ? history : []) {
      if (p && known(p.step) && known(p[field])) pts.push({ x: p.step, y: p[field] });
    }
    pts.sort((a, b) => a.x - b.x);
    return pts;
  }

  // The evaluations among a history's accuracy values: where the value
  // changes (a point that repeats the previous value carries the last
  // evaluation forward).
  function evaluations(history) {
    return series(history, "accuracy").filter((p, i, all) => i === 0 || p.y !== all[i - 1].y);
  }

  function renderCurves(job) {
    const title = byId("curves-job");
    if (!job) {
      title.textContent = "";
      drawCurve(byId("loss-curve"), [], { empty: "no jobs yet", latest: byId("loss-latest") });
      drawCurve(byId("accuracy-curve"), [], { empty: "no jobs yet", latest: byId("accuracy-latest") });
      return;
    }
    title.textContent = str(job.name) + " \u00b7 " + str(job.job_id);
    const hist = job.history;
    drawCurve(byId("loss-curve"), series(hist, "loss"),
      { format: fmtLoss, empty: "no loss reported yet", latest: byId("loss-latest") });
    drawCurve(byId("accuracy-curve"), evaluations(hist),
      { percent: true, format: fmtAccuracy, empty: "not evaluated yet", latest: byId("accuracy-latest") });
  }

  // ---- Workers of an elastic job ---------------------------------------------------

  // The selected job's workers now and every change of them, oldest first.
  function renderMembership(job) {
    const workers = job && Array.isArray(job.workers) ? job.workers.filter((w) => typeof w === "string") : [];
    const changes = job && Array.isArray(job.membership)
      ? job.membership.filter((c) => c && typeof c === "object") : [];
    byId("membership-workers").textContent = workers.length ? workers.length + " now: " + workers.join(", ") : "";
    const names = (v) => (Array.isArray(v) ? v.filter((t) => typeof t === "string") : []);
    byId("membership").replaceChildren(...changes.map((c) => {
      const what = [];
      if (names(c.left).length) what.push("left: " + names(c.left).join(", "));
      if (names(c.joined).length) what.push("joined: " + names(c.joined).join(", "));
      return h("li", null, [
        fmtClock(c.time_unix_ms) + " step " + fmtInt(c.step) + ": " + fmtInt(c.workers) + " worker(s) after " +
          fmtSeconds(c.seconds) + (what.length ? "; " + what.join("; ") : ""),
        typeof c.reason === "string" && c.reason ? h("span", { class: "reason" }, " (" + c.reason + ")") : null,
      ]);
    }));
    byId("membership-empty").hidden = changes.length > 0;
  }

  // ---- Tasks -------------------------------------------------------------------

  function renderTasks(tasks) {
    const rows = tasks.map((t) => {
      const up = t.up === true;
      const devices = Array.isArray(t.devices) ? t.devices : [];
      const shortDevices = devices.map((d) => String(d).replace(/^.*\/device:/, ""));
      return h("tr", { class: up ? undefined : "down" }, [
        h("th", { scope: "row" }, h("code", null, str(t.task))),
        h("td", null, up ? badge("up", "ok") : badge("down", "bad", typeof t.error === "string" ? t.error : undefined)),
        h("td", null, !up || typeof t.draining !== "boolean" ? DASH : t.draining ? badge("draining", "warn") : "no"),
        h("td", { class: "num" }, up ? fmtInt(t.graphs) : DASH),
        h("td", { title: devices.join("\n") || undefined }, shortDevices.length ? shortDevices.join(", ") : DASH),
        h("td", { class: "num" }, fmtSeconds(t.step_time_p50_seconds)),
        h("td", { class: "num" }, fmtSeconds(t.step_time_p99_seconds)),
        h("td", null, t.straggler === true ? badge("straggler", "bad")
          : typeof t.straggler === "boolean" ? "no" : DASH),
      ]);
    });
    byId("tasks").tBodies[0].replaceChildren(...rows);
    byId("tasks-empty").hidden = tasks.length > 0;
  }

  // ---- The loop -----------------------------------------------------------------

  function render(o) {
    const tasks = Array.isArray(o.tasks) ? o.tasks.filter((t) => t && typeof t === "object") : [];
    const jobs = Array.isArray(o.jobs) ? o.jobs.filter((j) => j && typeof j === "object") : [];
    const selected = selectJob(jobs);
    renderSummary(o, tasks, jobs);
    renderDiagnosis(o, selected);
    renderJobs(jobs, selected ? selected.job_id : null);
    renderCurves(selected);
    renderMembership(selected);
    renderTasks(tasks);
    document.body.dataset.ready = "1";
  }

  function showError(message) {
    const updated = byId("updated");
    updated.textContent = message + (lastOverview ? "; showing " + fmtClock(lastOverview.time_unix_ms) : "") +
      "; retrying";
    updated.classList.add("stale");
  }

  async function poll() {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), FETCH_TIMEOUT_MS);
    try {
      const r = await fetch("api/overview", { cache: "no-store", signal: controller.signal });
      if (!r.ok) throw new Error("the master answered HTTP " + r.status);
      const o = await r.json();
      if (!o || typeof o !== "object") throw new Error("the overview is not a JSON object");
      lastOverview = o;
      render(o);
    } catch (e) {
      showError(e && e.name === "AbortError" ? "the master did not answer" : "cannot reach the master: " +
        (e && e.message ? e.message : String(e)));
    } finally {
      clearTimeout(timer);
      setTimeout(poll, POLL_MS);
    }
  }

  window.addEventListener("hashchange", () => {
    chosenJobId = jobInHash();
    if (lastOverview) render(lastOverview);
  });
  poll();
})();
