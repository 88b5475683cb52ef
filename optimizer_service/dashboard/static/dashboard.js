// The dashboard's live updates: every page is rendered by the server; this
// script polls the same /api/ routes and refreshes the parts that change.
"use strict";

const POLL_MS = 1000;

function fmt(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds >= 1) return seconds.toFixed(2) + " s";
  return seconds >= 1e-3 ? (seconds * 1e3).toFixed(1) + " ms" : (seconds * 1e6).toFixed(0) + " µs";
}
function pct(ratio) {
  if (ratio === null || ratio === undefined) return "–";
  const v = Math.round(ratio * 100);
  return (v >= 0 ? "+" : "") + v + " %";
}
function times(ratio) { return ratio === null || ratio === undefined ? "–" : ratio.toFixed(2) + "×"; }
function rate(bytesPerSecond) {
  if (bytesPerSecond === null || bytesPerSecond === undefined) return "–";
  const mb = bytesPerSecond / 1e6;
  return (mb >= 100 ? mb.toFixed(0) : String(Number(mb.toPrecision(3)))) + " MB/s";
}
function ago(unix, now) {
  if (!unix) return "never";
  const s = Math.max(0, (now || Date.now() / 1000) - unix);
  return s < 120 ? s.toFixed(0) + " s ago" : (s / 60).toFixed(0) + " min ago";
}
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}
function setText(id, text) { const node = document.getElementById(id); if (node) node.textContent = text; }
async function getJSON(url) {
  const response = await fetch(url, {headers: {"Accept": "application/json"}, credentials: "same-origin"});
  if (!response.ok) throw new Error((await response.json().catch(() => ({}))).error || response.statusText);
  return response.json();
}
function every(ms, fn) {
  let busy = false;
  const run = async () => {
    if (busy || document.hidden) return;
    busy = true;
    try { await fn(); } catch (error) { console.warn("poll:", error.message); } finally { busy = false; }
  };
  run();
  return setInterval(run, ms);
}
function sparkline(values, width = 120, height = 24) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark"); svg.setAttribute("width", width); svg.setAttribute("height", height);
  if (values.length < 2) return svg;
  const low = Math.min(...values), high = Math.max(...values), span = (high - low) || 1, step = width / (values.length - 1);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("fill", "none"); line.setAttribute("stroke", "#4e79a7"); line.setAttribute("stroke-width", "1.5");
  line.setAttribute("points", values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v - low) / span * (height - 4)).toFixed(1)}`).join(" "));
  svg.append(line);
  return svg;
}
function replanning(r) { return r ? r.phase + (r.paused ? " (paused)" : "") : "off"; }

// ------------------------------------------------------------------ jobs page
function jobsPage(root) {
  const body = document.querySelector("#jobs tbody");
  const after = root.dataset.after || "";
  every(POLL_MS, async () => {
    const {jobs} = await getJSON("/api/jobs" + (after ? "?after=" + encodeURIComponent(after) : ""));
    if (!jobs.length) return;
    body.replaceChildren(...jobs.map(j => {
      const state = el("td", {}, el("span", {class: "state " + j.state}, j.state));
      if (j.lagging) state.append(" ", el("span", {class: "lag"}, j.lagging + " lagging"));
      const plan = "v" + j.committed_version + (j.running_version !== j.committed_version ? ` (running v${j.running_version})` : "");
      return el("tr", {"data-job": j.job_id},
        el("td", {}, el("a", {href: "/jobs/" + encodeURIComponent(j.job_id)}, j.job_id)), state,
        el("td", {}, `${j.ranks_connected}/${j.world_size}`), el("td", {}, plan), el("td", {}, j.iteration),
        el("td", {}, fmt(j.iteration_seconds)), el("td", {}, sparkline(j.sparkline)),
        el("td", {}, fmt(j.predicted_seconds)), el("td", {}, fmt(j.measured_seconds)),
        el("td", {}, pct(j.prediction_error_ratio)), el("td", {}, fmt(j.bound_iteration_seconds)),
        el("td", {}, replanning(j.replanning)));
    }));
  });
}

// ------------------------------------------------------------------- job page
function markerPlugin(markers) {
  return {hooks: {draw: [u => {
    const ctx = u.ctx;
    ctx.save();
    for (const m of markers) {
      const x = u.valToPos(m.iteration, "x", true);
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
      ctx.strokeStyle = m.kind === "switch" ? "#1f77b4" : "#f28e2b";
      ctx.lineWidth = 1.5 * devicePixelRatio;
      ctx.setLineDash(m.kind === "switch" ? [] : [4, 3]);
      ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
    }
    ctx.restore();
  }]}};
}

function steadyMax(values, high) {
  const steady = values.slice(Math.min(5, Math.floor(values.length / 4))).filter(v => v !== null).sort((a, b) => a - b);
  if (!steady.length) return high;
  return Math.min(high, steady[Math.floor(0.98 * (steady.length - 1))] * 1.25);
}

function jobPage(root) {
  const job = root.dataset.job;
  const base = "/api/jobs/" + encodeURIComponent(job);
  const data = [[], [], []];        // iteration, measured ms, predicted ms
  const markers = [];
  let last = -1, chart = null;
  const chartBox = document.getElementById("chart");
  chartBox.dataset.points = "0";

  function draw() {
    if (typeof uPlot === "undefined") return;
    if (!chart) {
      chartBox.replaceChildren();
      chart = new uPlot({
        width: Math.max(400, chartBox.clientWidth - 10), height: 260, plugins: [markerPlugin(markers)],
        // The first iterations (lazy setup, first-touch) can be 10x the rest: the y range is set by
        // the 98th percentile of what came after them, so the steady state stays readable.
        scales: {x: {time: false}, y: {range: (u, low, high) => [0, steadyMax(u.data[1], high)]}},
        axes: [{label: "iteration"}, {label: "ms"}],
        series: [{label: "iteration"}, {label: "measured", stroke: "#4e79a7", width: 1.5},
                 {label: "predicted", stroke: "#e15759", dash: [6, 4], width: 1.5}],
      }, data, chartBox);
    } else {
      chart.setData(data);
    }
  }

  every(POLL_MS, async () => {
    const t = await getJSON(`${base}/telemetry?since=${last}`);
    for (const it of t.iterations) {
      data[0].push(it.iteration); data[1].push(it.seconds * 1e3);
      data[2].push(it.predicted_seconds === null ? null : it.predicted_seconds * 1e3);
    }
    for (const s of t.switches) markers.push({iteration: s.iteration, kind: "switch", version: s.version});
    const keep = 2000;
    if (data[0].length > keep) for (const series of data) series.splice(0, series.length - keep);
    last = t.last;
    chartBox.dataset.points = String(data[0].length);
    chartBox.dataset.last = String(last);
    if (t.iterations.length || !chart) draw();
  });

  every(2 * POLL_MS, async () => {
    const j = await getJSON(base);
    const state = document.getElementById("job-state");
    state.textContent = j.state; state.className = "state " + j.state;
    setText("s-ranks", `${j.ranks_connected}/${j.world_size}`);
    setText("s-committed", "v" + j.committed_version); setText("s-running", "v" + j.running_version);
    setText("s-iteration", j.iteration); setText("s-seconds", fmt(j.iteration_seconds));
    setText("s-predicted", fmt(j.predicted_seconds)); setText("s-measured", fmt(j.measured_seconds));
    setText("s-error", pct(j.prediction_error_ratio)); setText("s-replanning", replanning(j.replanning));
    setText("s-bound", fmt(j.bound_iteration_seconds)); setText("s-ratio", times(j.ratio_to_bound));
    document.querySelector("#ranks tbody").replaceChildren(...j.ranks.map(r => el("tr",
      {class: (r.lagging ? "lagging" : "") + (r.connected ? "" : " gone")},
      el("td", {}, r.rank), el("td", {}, r.host), el("td", {}, r.backend), el("td", {}, r.connected ? "yes" : "no"),
      el("td", {}, r.iteration), el("td", {}, "v" + r.running_version), el("td", {}, fmt(r.last_iteration_seconds)),
      el("td", {}, fmt(r.last_wait_seconds)), el("td", {}, ago(r.last_seen_unix, j.now_unix)))));
    if (j.waits.length) document.querySelector("#waits tbody").replaceChildren(...j.waits.slice(0, 30).map(w => el("tr", {},
      el("td", {}, w.op), el("td", {}, w.channel), el("td", {}, w.motifs), el("td", {}, fmt(w.wait_seconds)),
      el("td", {}, fmt(w.mean_wait_seconds)))));
    const timesCells = p => [el("td", {}, fmt(p.predicted_seconds)), el("td", {}, fmt(p.measured_seconds)),
      el("td", {}, fmt(p.bound_iteration_seconds)), el("td", {}, times(p.predicted_ratio_to_bound)),
      el("td", {}, times(p.ratio_to_bound))];
    const pt = j.passthrough;
    document.querySelector("#plans tbody").replaceChildren(...j.plans.slice().reverse().map(p => el("tr", {},
      el("td", {}, el("a", {href: `/jobs/${encodeURIComponent(job)}/plans/${p.version}`}, "v" + p.version)),
      el("td", {}, p.state), el("td", {}, p.origin || "operator"), ...timesCells(p), el("td", {}, p.reason))),
      el("tr", {class: "passthrough"}, el("td", {}, "passthrough"), el("td", {}, j.running_version === 0 ? "running" : ""),
        el("td", {}, "no plan"), ...timesCells(pt),
        el("td", {}, j.plans.length ? "" : "No plans yet: the job runs passthrough.")));
    if (j.fit) showFit(j);
  });

  // A fitted model's lines as [where, entry]: every channel in channel order, then the host (search_view.fit_rows).
  function fitRows(fit) {
    const rows = Object.keys(fit.channels || {}).sort((a, b) => a - b).map(c => ["channel " + c, fit.channels[c]]);
    return fit.host ? rows.concat([["host", fit.host]]) : rows;
  }

  // The latest search's fitted model, as the page renders it (views.latest_search): channels in order, then the host.
  function showFit(j) {
    const fit = j.fit;
    setText("fit-caption", `What the latest search (v${j.search_version}) fitted to the job's telemetry and priced ` +
      `its plans with; calibrated: ${fmt(fit.calibrated_motif_seconds)} per motif.` +
      (j.bound ? ` Its bound: ${fmt(j.bound.seconds)}, bound by ${j.bound.binding}.` : ""));
    document.querySelector("#fit tbody").replaceChildren(...fitRows(fit).map(([where, e]) => el("tr", {},
      el("td", {}, where), el("td", {}, fmt(e.motif_seconds)),
      el("td", {}, `${fmt(e.round_seconds)} (${fmt(e.calibrated_round_seconds)})`),
      el("td", {}, `${rate(e.rate_bytes_per_s)} (${rate(e.calibrated_rate_bytes_per_s)})`),
      el("td", {}, e.samples), el("td", {}, e.how))));
    const hosts = ((j.bound && j.bound.hosts) || []).map(h => el("li", {},
      `host ${h.host.slice(0, 8)} (${h.cores} cores, ranks ${h.ranks.join(",")}): ${Math.round(100 * h.busy)}% busy; ` +
      `training loops ${fmt(h.step_thread_cpu_seconds)}, other threads ` +
      `${fmt(h.process_cpu_seconds - h.step_thread_cpu_seconds)} of CPU per iteration`));
    document.getElementById("fit-effects").replaceChildren(...(fit.effects || []).map(e => el("li", {},
      `prediction without ${e.parameter}: ${fmt(e.predicted_seconds_without)} ` +
      `(with all: ${fmt(fit.fit_predicted_seconds || fit.predicted_seconds)})`)));
    document.getElementById("fit-hosts").replaceChildren(...hosts);
    // A first search's other readings of its window (search_view.other_readings), the same sentence as the page's.
    const readings = [["other_reading", "every link at its calibrated rate", "motif_seconds", "per motif"],
                      ["per_motif_reading", "every link at its calibrated rate and round", "motif_seconds", "per motif"],
                      ["slowest_round_reading", "every link at its calibrated rate and fixed cost", "round_seconds",
                       "per round"]]
      .filter(([field]) => fit[field]).map(([field, how, value, unit]) => [how, fit[field], value, unit]);
    const chosen = readings.map(([, r]) => r.chosen_seconds).filter(s => typeof s === "number").pop();
    setText("fit-other", readings.length ? "Chosen by the worst of this fit and the window read with " +
      readings.map(([how, r, value, unit]) => `${how} (` + fitRows(r).filter(([, e]) => typeof e[value] === "number")
        .map(([where, e]) => `${where} ${fmt(e[value])}`).join(", ") + ` ${unit})`).join("; and with ") +
      (chosen !== undefined ? `; the chosen plan at the worst reading ${fmt(chosen)}` : "") + "." +
      (fit.predicted_between ? ` Predicted ${fmt(fit.predicted_seconds)}: the middle of the window read with all its ` +
        `excess per motif (${fmt(fit.predicted_between[0])}) and all of it per round ` +
        `(${fmt(fit.predicted_between[fit.predicted_between.length - 1])}).` : "") : "");
  }

  every(3 * POLL_MS, async () => {
    const e = await getJSON(`${base}/events?limit=100`);
    const now = Date.now() / 1000;
    if (e.events.length) document.getElementById("events").replaceChildren(...e.events.slice().reverse().map(x => el("li", {},
      el("time", {}, ago(x.unix, now)), " ", el("b", {}, x.kind),
      (x.version ? " v" + x.version : "") + (x.rank !== null ? " rank " + x.rank : "") + (x.message ? ": " + x.message : ""))));
    const seen = new Set(markers.filter(m => m.kind === "event").map(m => m.key));
    for (const d of e.decisions) {
      const key = d.unix + d.kind;
      if (d.iteration === null || d.iteration === undefined || seen.has(key)) continue;
      if (!["replan", "searched", "commit", "rollback", "cluster"].includes(d.kind)) continue;
      markers.push({iteration: d.iteration, kind: "event", key});
    }
    if (chart) chart.redraw(false);
  });

  // The controls act through the login session: the cookie goes along by itself (same origin), and the
  // session's CSRF value, rendered into the page, goes in a header no other site can set. The page
  // never sees the service's token.
  const controls = document.getElementById("controls");
  if (!controls) return;                   // read-only, or not logged in: no controls on the page
  controls.addEventListener("submit", event => event.preventDefault());
  const csrf = (document.querySelector("meta[name='p2-csrf']") || {}).content || "";
  const result = document.getElementById("action-result");
  async function act(path, body) {
    const headers = {"Content-Type": "application/json", "X-P2-CSRF": csrf};
    const response = await fetch(base + path, {method: "POST", headers, body: JSON.stringify(body),
                                               credentials: "same-origin"});
    const answer = await response.json().catch(() => ({}));
    result.className = response.ok ? "" : "error";
    result.textContent = response.ok ? describe(path, answer) : `refused (${response.status}): ${answer.error || response.statusText}`;
    result.dataset.status = String(response.status);
  }
  function describe(path, answer) {
    if (path === "/plans") return `plan v${answer.version} submitted: ${answer.state}`;
    return `replanning: ${replanning(answer.policy)}`;
  }
  const on = (id, fn) => { const b = document.getElementById(id); if (b) b.addEventListener("click", fn); };
  on("replan-now", () => act("/replan", {reason: "from the dashboard"}));
  on("pause", () => act("/replanning", {paused: true, reason: "from the dashboard"}));
  on("resume", () => act("/replanning", {paused: false, reason: "from the dashboard"}));
  on("submit-plan", () => {
    let plan;
    try { plan = JSON.parse(document.getElementById("plan-json").value); }
    catch (error) { result.className = "error"; result.textContent = "the plan is not JSON: " + error.message; result.dataset.status = "0"; return; }
    act("/plans", plan);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const root = document.querySelector("[data-page]");
  if (!root) return;
  if (root.dataset.page === "jobs") jobsPage(root);
  if (root.dataset.page === "job") jobPage(root);
});
