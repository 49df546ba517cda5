// odradek console: a single page polling the broker's JSON API (no reload, no external files).
"use strict";

const POLL_MS = 1500;
const FETCH_TIMEOUT_MS = 3000;
const TIMELINE_CAP = 500;
const FAULTS_CAP = 200;       // injected faults kept for the timeline (the newest)
const HISTORY_WINDOW_S = 600;
// The console's charts: [key, title, candidate series]. A candidate is [name, counter?]: the
// broker's MetricsHistory names its series as already computed rates ("messages_in_per_sec");
// a Prometheus counter ("..._total") is drawn as its per-second rate.
const CHARTS = [
  ["messages-in", "messages in /s", [["messages_in_per_sec", false],
    ["kafka_server_brokertopicmetrics_messagesin_total", true]]],
  ["bytes-in", "bytes in /s", [["bytes_in_per_sec", false],
    ["kafka_server_brokertopicmetrics_bytesin_total", true]]],
  ["bytes-out", "bytes out /s", [["bytes_out_per_sec", false],
    ["kafka_server_brokertopicmetrics_bytesout_total", true]]],
  ["under-replicated", "under-replicated partitions", [["under_replicated_partitions", false],
    ["kafka_server_replicamanager_underreplicatedpartitions", false]]],
  ["offline", "offline partitions", [["offline_partitions", false],
    ["kafka_controller_kafkacontroller_offlinepartitionscount", false]]],
  ["active-controller", "active controller", [["active_controller_count", false],
    ["kafka_controller_kafkacontroller_activecontrollercount", false]]],
  ["eventloop-lag", "event-loop lag p99 (s)", [["event_loop_lag_p99_seconds", false],
    ["odradek_eventloop_lag_seconds", false]]],
  ["produce-requests", "produce requests /s", [["produce_requests_per_sec", false]]],
  ["fetch-requests", "fetch requests /s", [["fetch_requests_per_sec", false]]],
  ["produce-p99", "produce total time p99 (ms)", [["produce_total_time_p99_ms", false]]],
];

const state = {
  cluster: null,          // last /api/cluster answer
  reachable: null,        // this page's broker answered the last poll?
  failures: 0,
  timeline: [],           // newest first, at most TIMELINE_CAP
  timelineKeys: new Set(),
  timelineSince: 0,
  seq: 0,                 // arrival order of timeline events
  cursors: new Map(),     // broker id -> newest event time seen from it (the next ?since=)
  peers: [],              // /api/timeline's "brokers": whose events are in, who is down
  faults: [],             // /api/faults: injected faults, oldest first, at most FAULTS_CAP
  auth: null,             // "Basic ..." from the login form (kept in this page's memory only)
  user: null,
  needLogin: false,
  pending: false,
};

const $ = (id) => document.getElementById(id);

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[i];
}

function fmtNum(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (a >= 1e3) return (v / 1e3).toFixed(1) + "k";
  if (a !== 0 && a < 0.01) return v.toExponential(1);
  return Number.isInteger(v) ? String(v) : v.toFixed(2);
}

function fmtTime(ms) {
  const d = new Date(ms);
  return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

// Every request of the page: the X-Odradek-Console header (a 401 then comes without a
// challenge, so the browser shows no dialog of its own) and, once logged in, the credentials.
function apiHeaders(extra) {
  const h = Object.assign({ "X-Odradek-Console": "1" }, extra || {});
  if (state.auth) h.Authorization = state.auth;
  return h;
}

async function getJSON(path, timeoutMs) {
  // (errors: a network failure or timeout has no .status; an HTTP error has it)
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs || FETCH_TIMEOUT_MS);
  try {
    const resp = await fetch(path, { signal: ctl.signal, cache: "no-store", headers: apiHeaders() });
    if (!resp.ok) {
      const err = new Error(path + ": HTTP " + resp.status);
      err.status = resp.status;
      throw err;
    }
    return await resp.json();
  } finally {
    clearTimeout(timer);
  }
}

// ---- routing ---------------------------------------------------------------------------------

function route() {
  const hash = decodeURIComponent(location.hash.replace(/^#/, "")) || "cluster";
  const slash = hash.indexOf("/");
  const page = slash < 0 ? hash : hash.slice(0, slash);
  const arg = slash < 0 ? null : hash.slice(slash + 1);
  const known = ["cluster", "topics", "groups", "timeline", "metrics"];
  return { page: known.includes(page) ? page : "cluster", arg };
}

function showPage() {
  const { page, arg } = route();
  for (const section of document.querySelectorAll("section.page")) {
    section.hidden = section.id !== "page-" + page;
  }
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.page === page);
  }
  $("topics-list-view").hidden = page === "topics" && arg !== null;
  $("topic-detail-view").hidden = !(page === "topics" && arg !== null);
  $("groups-list-view").hidden = page === "groups" && arg !== null;
  $("group-detail-view").hidden = !(page === "groups" && arg !== null);
}

// ---- connection state ------------------------------------------------------------------------

function setReachable(ok, error) {
  state.reachable = ok;
  const conn = $("connection");
  const banner = $("banner");
  if (ok) {
    state.failures = 0;
    const id = state.cluster ? state.cluster.broker_id : "?";
    conn.textContent = "broker " + id + " (" + location.host + ")";
    conn.className = "connection ok";
    banner.hidden = true;
    document.body.classList.remove("unreachable");
  } else {
    state.failures += 1;
    const id = state.cluster ? "broker " + state.cluster.broker_id : "the broker";
    conn.textContent = "unreachable";
    conn.className = "connection down";
    banner.textContent = id + " serving this page (" + location.host + ") is unreachable: "
      + (error ? error.message || String(error) : "no answer")
      + " — retrying every " + (POLL_MS / 1000) + " s (" + state.failures
      + " failed polls); the data below is from the last successful poll.";
    banner.hidden = false;
    document.body.classList.add("unreachable");
  }
}

function showApiError(e) {
  const box = $("api-error");
  box.hidden = e === null;
  box.textContent = e === null ? "" : "the broker could not answer " + e.message + "; retrying";
}

// ---- cluster ---------------------------------------------------------------------------------

function renderCluster(c) {
  $("cluster-id").textContent = c.cluster_id ? "cluster " + c.cluster_id : "";
  const ctl = c.controller || {};
  $("controller-id").textContent = ctl.id === null || ctl.id === undefined || ctl.id < 0 ? "none" : ctl.id;
  $("controller-epoch").textContent = ctl.epoch ?? "–";
  const brokers = c.brokers || [];
  $("brokers-alive").textContent = brokers.filter((b) => b.alive).length + " / " + brokers.length;
  const ur = c.under_replicated || [];
  const off = c.offline || [];
  $("under-replicated-count").textContent = ur.length;
  $("offline-count").textContent = off.length;
  $("under-replicated-list").textContent = ur.slice(0, 20).join(" ") + (ur.length > 20 ? " …" : "");
  $("offline-list").textContent = off.slice(0, 20).join(" ") + (off.length > 20 ? " …" : "");
  $("under-replicated-card").classList.toggle("under-replicated", ur.length > 0);
  $("offline-card").classList.toggle("offline", off.length > 0);

  const faults = Boolean(c.faults_enabled);
  for (const th of document.querySelectorAll(".faults-col")) th.hidden = !faults;
  const rows = brokers.slice().sort((a, b) => a.id - b.id).map((b) => {
    const role = [];
    if (b.id === ctl.id) role.push('<span class="pill controller">controller</span>');
    if (b.id === c.broker_id) role.push('<span class="pill">serving this page</span>');
    const actions = Array.isArray(c.fault_actions) ? c.fault_actions : ["kill", "restart", "pause", "resume"];
    const buttons = faults ? '<td class="faults">' + actions.map((a) => (
      '<button class="fault ' + a + '" data-action="' + a + '" data-broker="' + esc(b.id)
      + '" id="fault-' + a + '-' + esc(b.id) + '">' + a + "</button>")).join("") + "</td>" : "";
    return '<tr class="broker ' + (b.alive ? "alive" : "dead") + '" data-broker="' + esc(b.id) + '">'
      + "<td>" + esc(b.id) + "</td><td>" + esc(b.host ?? "") + "</td><td>" + esc(b.port ?? "")
      + '</td><td><span class="pill ' + (b.alive ? "alive" : "dead") + '">'
      + (b.alive ? "alive" : "dead / unreachable") + "</span></td><td>" + role.join(" ") + "</td>"
      + buttons + "</tr>";
  });
  setRows("brokers", rows.join(""));
}

// Replace a tbody's rows only when they changed (keeps focus and avoids flicker).
function setRows(id, html) {
  const el = $(id);
  if (el.dataset.html !== html) {
    el.innerHTML = html;
    el.dataset.html = html;
  }
}

async function fault(action, broker) {
  const c = state.cluster;
  if (!c || !c.faults_enabled) return;
  const out = $("fault-result");
  out.textContent = action + " broker " + broker + "…";
  try {
    const resp = await fetch("/api/faults/" + action, {
      method: "POST",
      headers: apiHeaders({ "Content-Type": "application/json", "X-Odradek-CSRF": c.csrf_token || "" }),
      body: JSON.stringify({ broker: Number(broker) }),
    });
    const text = await resp.text();
    out.textContent = action + " broker " + broker + ": " + (resp.ok ? "done" : "HTTP " + resp.status + " " + text);
  } catch (e) {
    out.textContent = action + " broker " + broker + " failed: " + e.message;
  }
}

// ---- topics ----------------------------------------------------------------------------------

function renderTopics(list) {
  const showInternal = $("show-internal").checked;
  const rows = list.filter((t) => showInternal || !t.internal)
    .sort((a, b) => a.name.localeCompare(b.name)).map((t) => {
      const ur = Number(t.under_replicated || 0);
      return '<tr class="clickable topic' + (ur > 0 ? " under-replicated" : "") + '" data-href="#topics/'
        + esc(encodeURIComponent(t.name)) + '"><td>' + esc(t.name) + (t.internal ? ' <span class="pill">internal</span>' : "")
        + '</td><td class="num">' + esc(t.partitions) + '</td><td class="num">' + esc(t.replication_factor)
        + '</td><td class="num">' + esc(ur) + "</td></tr>";
    });
  setRows("topics", rows.join("") || '<tr><td colspan="4" class="muted">no topics</td></tr>');
}

function renderTopic(t) {
  $("topic-name").textContent = t.name;
  const rows = (t.partitions || []).slice().sort((a, b) => a.partition - b.partition).map((p) => {
    const cls = p.offline ? "offline" : p.under_replicated ? "under-replicated" : "";
    const st = p.offline ? "offline" : p.under_replicated ? "under-replicated" : "ok";
    const leader = p.leader === null || p.leader === undefined || p.leader < 0 ? "none" : p.leader;
    return '<tr class="partition ' + cls + '" data-partition="' + esc(p.partition) + '"><td class="num">'
      + esc(p.partition) + '</td><td class="num">' + esc(leader) + "</td><td>" + esc((p.replicas || []).join(", "))
      + "</td><td>" + esc((p.isr || []).join(", ")) + '</td><td class="num">' + esc(p.log_start_offset ?? "–")
      + '</td><td class="num">' + esc(p.high_watermark ?? "–") + '</td><td class="num">'
      + esc(p.log_end_offset ?? "–") + '</td><td class="num">' + esc(fmtBytes(p.size_bytes))
      + "</td><td>" + st + "</td></tr>";
  });
  setRows("topic-partitions", rows.join(""));
  const configs = Object.entries(t.configs || {}).sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => "<tr><td>" + esc(k) + "</td><td>" + esc(v) + "</td></tr>");
  setRows("topic-configs", configs.join("") || '<tr><td colspan="2" class="muted">defaults</td></tr>');
}

// ---- groups ----------------------------------------------------------------------------------

function renderGroups(list) {
  const rows = list.slice().sort((a, b) => a.group_id.localeCompare(b.group_id)).map((g) => (
    '<tr class="clickable group" data-href="#groups/' + esc(encodeURIComponent(g.group_id)) + '"><td>'
    + esc(g.group_id) + "</td><td>" + esc(g.state) + "</td><td>" + esc(g.protocol_type ?? "")
    + '</td><td class="num">' + esc(Array.isArray(g.members) ? g.members.length : g.members) + "</td></tr>"));
  setRows("groups", rows.join("") || '<tr><td colspan="4" class="muted">no groups</td></tr>');
}

function renderGroup(g) {
  $("group-name").textContent = g.group_id;
  $("group-state").textContent = g.state;
  const members = (g.members || []).map((m) => (
    "<tr><td>" + esc(m.member_id) + "</td><td>" + esc(m.client_id) + "</td><td>" + esc(m.host)
    + "</td><td>" + esc((m.assignment || []).map(([t, p]) => t + "-" + p).join(", ")) + "</td></tr>"));
  setRows("group-members", members.join("") || '<tr><td colspan="4" class="muted">no members</td></tr>');
  let total = 0;
  const offsets = (g.offsets || []).slice().sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition)
    .map((o) => {
      if (typeof o.lag === "number") total += o.lag;
      return '<tr class="offset' + (o.lag > 0 ? " lagging" : "") + '"><td>' + esc(o.topic) + '</td><td class="num">'
        + esc(o.partition) + '</td><td class="num">' + esc(o.committed ?? "–") + '</td><td class="num">'
        + esc(o.log_end_offset ?? "–") + '</td><td class="num lag">' + esc(o.lag ?? "–") + "</td></tr>";
    });
  setRows("group-offsets", offsets.join("") || '<tr><td colspan="5" class="muted">no committed offsets</td></tr>');
  $("group-total-lag").textContent = total;
}

// ---- timeline --------------------------------------------------------------------------------

function addTimeline(events) {
  let added = false;
  for (const e of events) {
    const key = e.time_ms + "|" + (e.broker ?? "") + "|" + e.partition + "|" + e.what + "|" + (e.line ?? "") + "|" + e.leader_epoch;
    if (e.broker !== undefined && e.broker !== null) {
      state.cursors.set(e.broker, Math.max(state.cursors.get(e.broker) || 0, e.time_ms));
    }
    if (state.timelineKeys.has(key)) continue;
    state.timelineKeys.add(key);
    state.seq += 1;
    state.timeline.push(Object.assign({ key, seq: state.seq }, e));
    state.timelineSince = Math.max(state.timelineSince, e.time_ms);
    added = true;
  }
  if (!added) return false;
  // newest first; within a millisecond, the later line (the API answers oldest first) first
  state.timeline.sort((a, b) => b.time_ms - a.time_ms || b.seq - a.seq);
  while (state.timeline.length > TIMELINE_CAP) {
    state.timelineKeys.delete(state.timeline.pop().key);
  }
  return true;
}

// A leader or ISR change, or a partition's own state change (New/Online/Offline), as opposed
// to the lines that repeat what is known (requests sent, replica states).
function isChange(e) {
  const what = String(e.what);
  return what === "leader change" || what === "isr change" || /Partition$/.test(what);
}

function renderTimeline() {
  const filter = $("timeline-filter").value.trim();
  const changesOnly = $("timeline-changes-only").checked;
  const shown = state.timeline.filter((e) => (!filter || String(e.partition).includes(filter))
    && (!changesOnly || isChange(e)));
  const eventRows = shown.map((e) => ({ t: e.time_ms, seq: e.seq, html:
    '<tr class="event ' + esc(String(e.what).replace(/\s+/g, "-")) + '" data-partition="' + esc(e.partition)
    + '" data-broker="' + esc(e.broker ?? "") + '"><td>'
    + esc(fmtTime(e.time_ms)) + '</td><td class="num">' + esc(e.broker ?? "–") + "</td><td>" + esc(e.partition)
    + "</td><td>" + esc(e.what) + '</td><td class="num">'
    + esc(e.leader ?? "–") + "</td><td>" + esc(Array.isArray(e.isr) ? e.isr.join(", ") : e.isr ?? "")
    + '</td><td class="num">' + esc(e.leader_epoch ?? "–") + '</td><td class="timeline-line" title="'
    + esc(e.line ?? "") + '">' + esc(e.line ?? "")
    + "</td></tr>" }));
  // the injected faults, in the same table (not filtered by partition: they name brokers)
  const faultRows = filter ? [] : state.faults.map((f) => ({ t: f.time_ms, seq: 0, html:
    '<tr class="fault-event ' + esc(f.kind) + '" data-kind="' + esc(f.kind) + '" data-phase="' + esc(f.phase) + '"><td>'
    + esc(fmtTime(f.time_ms)) + '</td><td class="num">' + esc(faultBrokers(f)) + "</td><td>fault</td><td>"
    + esc(f.kind + " " + (f.phase === "instant" ? "" : f.phase)) + '</td><td colspan="3">'
    + esc((f.targets || []).join(" ")) + '</td><td class="timeline-line">' + esc(f.detail || "") + "</td></tr>" }));
  const rows = eventRows.concat(faultRows).sort((a, b) => b.t - a.t || b.seq - a.seq).map((r) => r.html);
  setRows("timeline", rows.join("") || '<tr><td colspan="8" class="muted">no leader or ISR changes yet</td></tr>');
  $("timeline-count").textContent = state.timeline.length;
  renderPeers();
  renderLanes(shown);
}

function faultBrokers(f) {
  return (f.targets || []).filter((t) => /^broker-/.test(t)).map((t) => t.slice(7)).join(",") || "–";
}

// Whose events the timeline has: every broker's listener asked by the serving broker; a
// broker that did not answer is named with the reason (its events come once it is back).
function renderPeers() {
  const html = state.peers.map((b) => '<span class="peer ' + (b.ok ? "up" : "down") + '" data-broker="'
    + esc(b.id) + '">broker ' + esc(b.id) + (b.ok ? " ✓" : " down: " + esc(b.error || "?")) + "</span>").join(" · ");
  const box = $("timeline-brokers");
  if (box.dataset.html !== html) { box.innerHTML = html ? "events from: " + html : ""; box.dataset.html = html; }
}

// One lane per partition (at most 12, the most recently changed), a mark per event, the leader
// written next to each leader change: a quick picture of failovers over the kept window.
function renderLanes(events) {
  const box = $("timeline-lanes");
  if (events.length === 0) { box.innerHTML = ""; return; }
  const lanes = [];
  for (const e of events) if (!lanes.includes(e.partition) && lanes.length < 12) lanes.push(e.partition);
  const t1 = Math.max(events[0].time_ms, ...state.faults.map((f) => f.time_ms));
  const t0 = Math.min(...events.map((e) => e.time_ms));
  const width = 900, left = 110, laneH = 22, height = lanes.length * laneH + 24;
  const x = (t) => left + (t1 === t0 ? (width - left - 20) : (t - t0) / (t1 - t0) * (width - left - 20));
  let svg = '<svg id="timeline-svg" viewBox="0 0 ' + width + " " + height + '" width="100%" height="' + height + '">';
  lanes.forEach((p, i) => {
    const y = 14 + i * laneH;
    svg += '<text x="4" y="' + (y + 4) + '">' + esc(p) + "</text>";
    svg += '<line x1="' + left + '" x2="' + (width - 10) + '" y1="' + y + '" y2="' + y + '" stroke="#ddd"/>';
  });
  // the faults: an orange line across the lanes at each fault's start (or instant), a green one
  // at its end, labelled with its kind and broker
  for (const f of state.faults) {
    if (f.time_ms < t0) continue;
    const fx = x(f.time_ms).toFixed(1);
    const colour = f.phase === "end" ? "#38a169" : "#dd6b20";
    svg += '<line class="fault-mark" data-kind="' + esc(f.kind) + '" x1="' + fx + '" x2="' + fx + '" y1="2" y2="'
      + (height - 14) + '" stroke="' + colour + '" stroke-width="2" stroke-dasharray="4 2"><title>'
      + esc(fmtTime(f.time_ms) + " " + f.kind + " " + f.phase + " " + (f.targets || []).join(" ")) + "</title></line>";
    svg += '<text x="' + (Number(fx) + 3) + '" y="' + (height - 16) + '" fill="' + colour + '">'
      + esc(f.kind + (f.phase === "end" ? " end" : "") + " " + faultBrokers(f)) + "</text>";
  }
  for (const e of events) {
    const i = lanes.indexOf(e.partition);
    if (i < 0) continue;
    const y = 14 + i * laneH;
    const leaderChange = String(e.what).startsWith("leader");
    svg += '<circle cx="' + x(e.time_ms).toFixed(1) + '" cy="' + y + '" r="' + (leaderChange ? 5 : 3)
      + '" fill="' + (leaderChange ? "#c53030" : "#2b6cb0") + '"><title>' + esc(fmtTime(e.time_ms) + " "
      + e.partition + " " + e.what + " leader " + e.leader + " isr " + (e.isr || []).join(",")) + "</title></circle>";
    if (leaderChange) svg += '<text x="' + (x(e.time_ms) + 6).toFixed(1) + '" y="' + (y - 5) + '">' + esc(e.leader) + "</text>";
  }
  svg += '<text x="' + left + '" y="' + (height - 2) + '">' + esc(fmtTime(t0)) + "</text>";
  svg += '<text x="' + (width - 90) + '" y="' + (height - 2) + '">' + esc(fmtTime(t1)) + "</text></svg>";
  box.innerHTML = svg;
}

// ---- metrics ---------------------------------------------------------------------------------

// Per-second rate of a counter's samples [[t, v], ...] (t in seconds); a reset starts again.
function rate(points) {
  const out = [];
  for (let i = 1; i < points.length; i++) {
    const dt = points[i][0] - points[i - 1][0];
    const dv = points[i][1] - points[i - 1][1];
    if (dt > 0 && dv >= 0) out.push([points[i][0], dv / dt]);
  }
  return out;
}

function normaliseTime(points) {
  // accept seconds or milliseconds since the epoch
  return points.map(([t, v]) => [t > 1e11 ? t / 1000 : t, Number(v)]);
}

function chartSVG(points) {
  const w = 320, h = 120, pad = 28;
  const now = points.length ? points[points.length - 1][0] : Date.now() / 1000;
  // the kept span (at least a minute, at most the 10 minutes kept): a young broker's few
  // points make a line across the chart, not a dot at its right edge
  const first = points.length ? points[0][0] : now - HISTORY_WINDOW_S;
  const span = Math.min(HISTORY_WINDOW_S, Math.max(60, now - first));
  const t0 = now - span;
  const vs = points.map((p) => p[1]);
  const vmin = Math.min(0, ...vs);
  let vmax = Math.max(vmin, ...vs);
  if (vmax <= vmin) vmax = vmin + 1;
  const x = (t) => pad + (t - t0) / span * (w - pad - 4);
  const y = (v) => h - 14 - (v - vmin) / (vmax - vmin) * (h - 22);
  const pts = points.filter((p) => p[0] >= t0).map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
  return '<svg viewBox="0 0 ' + w + " " + h + '" preserveAspectRatio="none">'
    + '<line class="axis" x1="' + pad + '" x2="' + w + '" y1="' + (h - 14) + '" y2="' + (h - 14) + '"/>'
    + '<line class="axis" x1="' + pad + '" x2="' + pad + '" y1="4" y2="' + (h - 14) + '"/>'
    + '<text x="2" y="12">' + esc(fmtNum(vmax)) + "</text>"
    + '<text x="2" y="' + (h - 16) + '">' + esc(fmtNum(vmin)) + "</text>"
    + '<text x="' + pad + '" y="' + (h - 2) + '">-' + (span >= 120 ? Math.round(span / 60) + " min" : Math.round(span) + " s") + "</text>"
    + '<text x="' + (w - 24) + '" y="' + (h - 2) + '">now</text>'
    + (pts ? '<polyline points="' + pts + '"/>' : "") + "</svg>";
}

function renderCharts(history) {
  const box = $("charts");
  for (const [key, title, candidates] of CHARTS) {
    let div = $("chart-" + key);
    if (!div) {
      div = document.createElement("div");
      div.className = "chart";
      div.id = "chart-" + key;
      box.appendChild(div);
    }
    const found = candidates.find(([n]) => Array.isArray(history[n]) && history[n].length > 0)
      || candidates.find(([n]) => Array.isArray(history[n]));
    let points = found ? normaliseTime(history[found[0]]) : [];
    if (found && found[1]) points = rate(points);
    const last = points.length ? fmtNum(points[points.length - 1][1]) : "no data";
    div.dataset.points = String(points.length);
    div.dataset.max = String(points.reduce((m, p) => Math.max(m, p[1]), 0));
    div.innerHTML = '<div class="title">' + esc(title) + '<span class="last">' + esc(last) + "</span></div>"
      + chartSVG(points);
  }
}

// ---- polling ---------------------------------------------------------------------------------

async function poll() {
  if (state.pending || state.needLogin) return;
  state.pending = true;
  try {
    const cluster = await getJSON("/api/cluster");
    state.cluster = cluster;
    setReachable(true);
    renderCluster(cluster);
    const { page, arg } = route();
    const hash = location.hash;
    // an answer for a page left meanwhile is dropped (the next poll asks for the new page)
    const current = (render) => (data) => { if (location.hash === hash) render(data); };
    if (page === "topics" && arg === null) current(renderTopics)(await getJSON("/api/topics"));
    if (page === "topics" && arg !== null) {
      current(renderTopic)(await getJSON("/api/topics/" + encodeURIComponent(arg)));
    }
    if (page === "groups" && arg === null) current(renderGroups)(await getJSON("/api/groups"));
    if (page === "groups" && arg !== null) {
      current(renderGroup)(await getJSON("/api/groups/" + encodeURIComponent(arg)));
    }
    // the timeline is kept up to date on every page so that no change is missed
    // one millisecond back: an event logged in the same millisecond as the newest one seen
    // still arrives (the keys drop the repeats)
    // a cursor per broker (its newest event seen, one millisecond back), so a broker that was
    // down or slow for a poll still delivers its older events; unknown brokers: everything
    const since = Array.from(state.cursors, ([b, t]) => b + ":" + Math.max(0, t - 1)).join(",");
    // (longer: the serving broker waits up to 2 s for a slow peer before answering without it)
    const answer = await getJSON("/api/timeline" + (since ? "?since=" + since : ""), FETCH_TIMEOUT_MS + 2000);
    const events = Array.isArray(answer) ? answer : answer.events || [];
    if (!Array.isArray(answer) && Array.isArray(answer.brokers)) state.peers = answer.brokers;
    let faultsChanged = false;
    try {
      const faults = await getJSON("/api/faults");
      const kept = Array.isArray(faults) ? faults.slice(-FAULTS_CAP) : [];
      faultsChanged = JSON.stringify(kept) !== JSON.stringify(state.faults);
      state.faults = kept;
    } catch (e) {
      if (e.status !== 404) throw e;  // a broker without the route: no faults drawn
    }
    if ((addTimeline(events) || faultsChanged || page === "timeline") && page === "timeline") renderTimeline();
    if (page === "metrics") {
      const names = CHARTS.flatMap((c) => c[2].map(([n]) => n));
      let history = {};
      try {
        history = await getJSON("/api/metrics/history?names=" + names.map(encodeURIComponent).join(","));
      } catch (e) {
        if (e.status !== 404) throw e;  // 404: this broker keeps no history; empty charts
      }
      renderCharts(history);
    }
    showApiError(null);
  } catch (e) {
    if (e.status === undefined) setReachable(false, e);
    else if (e.status === 401) showLogin(state.auth ? "wrong user name or password (or the broker refused them)" : "");
    else showApiError(e);  // the broker answered, not this request (a topic deleted, ...)
  } finally {
    state.pending = false;
  }
}

// ---- login (a cluster with a SASL listener) --------------------------------------------------
// The API answers 401 without credentials; the form's user and password go into the page's
// memory as a Basic Authorization header sent with every fetch (a browser does not send
// credentials written into a URL with fetch()). The broker checks them with its SASL listener,
// and ACLs decide what the user sees. Closing the tab forgets them.

function showLogin(error) {
  state.needLogin = true;
  state.auth = null;
  $("login").hidden = false;
  $("user-box").hidden = true;
  $("login-error").textContent = error || "";
  $("connection").textContent = "log in";
  $("connection").className = "connection";
}

function login(ev) {
  ev.preventDefault();
  const user = $("login-user").value;
  const password = $("login-password").value;
  // UTF-8, then base64 (btoa takes Latin-1 only)
  const bytes = new TextEncoder().encode(user + ":" + password);
  state.auth = "Basic " + btoa(String.fromCharCode(...bytes));
  state.user = user;
  state.needLogin = false;
  $("login-password").value = "";
  $("login-error").textContent = "";
  $("login").hidden = true;
  $("user-name").textContent = user;
  $("user-box").hidden = false;
  poll();
}

function logout() {
  state.user = null;
  state.cluster = null;
  state.timeline = [];
  state.timelineKeys.clear();
  state.cursors.clear();
  state.faults = [];
  for (const id of ["brokers", "topics", "topic-partitions", "groups", "timeline"]) setRows(id, "");
  showLogin("");
}

function start() {
  $("timeline-cap").textContent = TIMELINE_CAP;
  window.addEventListener("hashchange", () => {
    // a detail page shows nothing of the previous topic or group while its own data comes
    for (const id of ["topic-partitions", "topic-configs", "group-members", "group-offsets"]) setRows(id, "");
    for (const id of ["topic-name", "group-name", "group-state"]) $(id).textContent = "";
    showPage();
    poll();
  });
  document.addEventListener("click", (ev) => {
    const btn = ev.target.closest("button.fault");
    if (btn) { fault(btn.dataset.action, btn.dataset.broker); return; }
    const row = ev.target.closest("tr[data-href]");
    if (row) location.hash = row.dataset.href;
  });
  $("show-internal").addEventListener("change", poll);
  $("login").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  $("timeline-filter").addEventListener("input", renderTimeline);
  $("timeline-changes-only").addEventListener("change", renderTimeline);
  showPage();
  poll();
  setInterval(poll, POLL_MS);
}

start();
