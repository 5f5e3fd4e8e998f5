// Tideway dashboard: reads the public API every few seconds and renders it. No framework and
// no build step: the file is embedded in the server binary as it is.
"use strict";

const params = new URLSearchParams(location.search);
const REFRESH_MS = Math.max(500, Number(params.get("refresh")) || 2000);
// A token given once in the URL (?token=...) is kept for the session and sent as a bearer token,
// so the page works unchanged when the API requires authentication.
if (params.get("token")) sessionStorage.setItem("tideway-token", params.get("token"));
const TOKEN = sessionStorage.getItem("tideway-token");

const PHASE_ORDER = ["Pending", "Preempted", "Admitted", "Assigned", "Running", "Failed", "Succeeded", "Cancelled"];
const TERMINAL = new Set(["Succeeded", "Failed", "Cancelled"]);
const MAX_PAGES = 20;
const MAX_EXPLAINED = 10;
const MAX_FINISHED_SHOWN = 100;

let paused = false;
let selected = null; // name of the workload shown in the detail panel
let workloads = [];
let schedulesAvailable = true;

// ---------- helpers ----------

/** Builds an element; children are nodes or strings (always inserted as text, never HTML). */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function replace(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The fleet's clock minus the browser's, from the `tideway-now` header of every answer: a dev or
// demo fleet runs its calendar faster than the wall clock, so ages and "now" on the timeline are
// measured on the server's clock, the one that stamped the objects.
let serverOffsetMs = 0;

/** The fleet's present, in milliseconds since the epoch. */
function serverNow() {
  return Date.now() + serverOffsetMs;
}

async function api(path) {
  const headers = { Accept: "application/json" };
  if (TOKEN) headers.Authorization = `Bearer ${TOKEN}`;
  const r = await fetch(path, { headers, cache: "no-store" });
  const stamped = Date.parse(r.headers.get("tideway-now") || "");
  if (!Number.isNaN(stamped)) serverOffsetMs = stamped - Date.now();
  if (!r.ok) {
    let detail = r.statusText;
    try {
      const p = await r.json();
      detail = p.detail || p.title || detail;
    } catch (_) { /* not problem+json */ }
    throw new HttpError(r.status, `${path}: ${r.status} ${detail}`);
  }
  return r.json();
}

function ago(ts) {
  if (!ts) return "—";
  const s = Math.max(0, (serverNow() - Date.parse(ts)) / 1000);
  return duration(s);
}

function duration(s) {
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${Math.floor((s % 86400) / 3600)}h`;
}

function pct(x) {
  return `${Math.round(x * 100)}%`;
}

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1);
  return sorted[Math.max(0, i)];
}

function gpus(w) {
  return (w.spec.podSets || []).reduce((n, ps) => n + ps.count * ps.gpusPerPod, 0);
}

function flavors(w) {
  return [...new Set((w.spec.podSets || []).map((ps) => ps.flavor))].join(",");
}

function phaseOf(w) {
  return (w.status && w.status.phase) || "Pending";
}

function badge(text, cls) {
  return h("span", { class: `badge ${cls || text}` }, text);
}

function capBar(c) {
  const total = Math.max(1, c.total);
  const seg = (cls, n) => {
    const el = h("div", { class: `seg ${cls}`, title: `${n} ${cls}` });
    el.style.width = `${(100 * n) / total}%`;
    return el;
  };
  return h("div", { class: "bar" },
    seg("allocated", c.allocated), seg("free", c.free),
    seg("unhealthy", c.unhealthy), seg("cordoned", c.cordoned));
}

// ---------- panels ----------

function renderRaft(st) {
  const el = document.getElementById("raft");
  el.classList.toggle("noleader", st.leader === null || st.leader === undefined);
  el.textContent = `node ${st.id} · ${st.state} · term ${st.term} · leader ${st.leader ?? "none"} · applied ${st.lastApplied ?? 0}`;
}

function renderCapacity(cap) {
  const f = cap.fleet;
  const card = (k, v) => h("div", { class: "card", dataset: { metric: k } }, h("div", { class: "v" }, v), h("div", { class: "k" }, k));
  const fragFree = cap.clusters.flatMap((c) => c.pools).reduce((a, p) => a + p.capacity.free, 0);
  const fragWeighted = fragFree === 0 ? 0 : cap.clusters.flatMap((c) => c.pools)
    .reduce((a, p) => a + p.fragmentation * p.capacity.free, 0) / fragFree;
  replace(document.getElementById("fleet"),
    card("GPUs", f.total), card("allocated", f.allocated), card("free", f.free),
    card("borrowed", f.borrowed), card("unhealthy", f.unhealthy), card("cordoned", f.cordoned),
    card("fragmented", pct(fragWeighted)),
    ...cap.flavors.map((fl) => card(`${fl.flavor} free`, `${fl.capacity.free}/${fl.capacity.total}`)));
  document.getElementById("frag-def").textContent = `fragmented: ${cap.fragmentationDefinition}`;

  const byRegion = new Map();
  for (const c of cap.clusters) {
    if (!byRegion.has(c.region)) byRegion.set(c.region, []);
    byRegion.get(c.region).push(c);
  }
  const regionTotals = new Map(cap.regions.map((r) => [r.region, r.capacity]));
  const regions = [...byRegion.keys()].sort().map((region) => {
    const rc = regionTotals.get(region) || { total: 0, free: 0 };
    return h("div", { class: "region", dataset: { region } },
      h("h3", {}, h("span", {}, region), h("span", { class: "muted" }, `${rc.free} free of ${rc.total}`)),
      ...byRegion.get(region).map((c) => h("div", { class: "cluster", dataset: { cluster: c.cluster } },
        h("div", {}, h("span", { class: "name" }, c.cluster), " ", badge(c.phase),
          h("span", { class: "muted small" }, `  digest ${ago(c.digestAt)} ago`)),
        ...c.pools.map((p) => h("div", { class: "pool", dataset: { pool: p.pool, flavor: p.flavor } },
          h("span", {}, `${p.pool} · ${p.flavor} `, h("span", { class: "muted" }, p.kind)),
          capBar(p.capacity),
          h("span", { class: "meta", title: `largest gang of ${p.largestGang.podGpus}-GPU pods per node/rack/zone: ${p.largestGang.node}/${p.largestGang.rack}/${p.largestGang.zone}` },
            `${p.capacity.free}/${p.capacity.total} free · frag ${pct(p.fragmentation)}`))))));
  });
  replace(document.getElementById("regions"), regions.length ? regions : h("p", { class: "muted" }, "No member cluster has reported capacity yet."));
}

function renderMembers(list) {
  const rows = list.items.map((m) => {
    const st = m.status || {};
    const phase = st.phase || "NotReady";
    return h("tr", { dataset: { member: m.metadata.name } },
      h("td", {}, m.metadata.name),
      h("td", {}, m.spec.region, m.spec.zone ? ` / ${m.spec.zone}` : ""),
      h("td", { class: "health" }, badge(phase)),
      h("td", {}, st.lastHeartbeat ? `${ago(st.lastHeartbeat)} ago` : "never"),
      h("td", {}, (m.spec.pools || []).map((p) => `${p.name} (${p.kind})`).join(", ")),
      h("td", { class: "muted" }, st.message || ""));
  });
  replace(document.querySelector("#members tbody"), rows.length ? rows : h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No member cluster registered.")));
}

function renderQueues(list) {
  const waits = new Map();
  const now = serverNow();
  // Time to admission: of the workloads admitted so far, and the wait so far of those pending.
  for (const w of workloads) {
    const st = w.status || {};
    if (!st.submittedAt) continue;
    const until = st.admittedAt ? Date.parse(st.admittedAt) : phaseOf(w) === "Pending" ? now : null;
    if (until === null) continue;
    const q = w.spec.queue;
    if (!waits.has(q)) waits.set(q, []);
    waits.get(q).push(Math.max(0, (until - Date.parse(st.submittedAt)) / 1000));
  }
  // Counted from the workloads when the server sends no queue status.
  const counted = new Map();
  for (const w of workloads) {
    const q = w.spec.queue;
    if (!counted.has(q)) counted.set(q, { pendingWorkloads: 0, activeWorkloads: 0, usedGpus: {} });
    const c = counted.get(q);
    const ph = phaseOf(w);
    if (ph === "Pending" || ph === "Preempted") c.pendingWorkloads += 1;
    if (ph === "Admitted" || ph === "Assigned" || ph === "Running") {
      c.activeWorkloads += 1;
      for (const ps of w.spec.podSets || []) c.usedGpus[ps.flavor] = (c.usedGpus[ps.flavor] || 0) + ps.count * ps.gpusPerPod;
    }
  }
  const rows = list.items.map((q) => {
    const st = q.status || counted.get(q.metadata.name) || {};
    const used = st.usedGpus || {};
    const quotas = (q.spec.quotas || []).map((fq) => {
      const limit = fq.max ?? fq.guaranteed + (fq.borrowingLimit ?? 0);
      const u = used[fq.flavor] || 0;
      const bar = h("div", { class: "bar" });
      const seg = h("div", { class: "seg allocated" });
      seg.style.width = `${Math.min(100, (100 * u) / Math.max(1, limit))}%`;
      bar.append(seg);
      return h("div", { class: "quota", title: `guaranteed ${fq.guaranteed}, limit ${limit}` }, bar, `${fq.flavor} ${u}/${limit}`);
    });
    for (const [flavor, u] of Object.entries(used)) {
      if (!(q.spec.quotas || []).some((fq) => fq.flavor === flavor)) quotas.push(h("div", {}, `${flavor} ${u} (no quota)`));
    }
    const ws = (waits.get(q.metadata.name) || []).sort((a, b) => a - b);
    const p50 = percentile(ws, 0.5);
    const p90 = percentile(ws, 0.9);
    return h("tr", { dataset: { queue: q.metadata.name } },
      h("td", {}, q.metadata.name),
      h("td", {}, q.spec.cohort || "—"),
      h("td", { class: "num" }, st.pendingWorkloads ?? 0),
      h("td", { class: "num" }, st.activeWorkloads ?? 0),
      h("td", {}, quotas.length ? quotas : h("span", { class: "muted" }, "no quotas")),
      h("td", {}, p50 === null ? "—" : `${duration(p50)} / ${duration(p90)}`));
  });
  replace(document.querySelector("#queues tbody"), rows);
}

/** The pending reason as one sentence; the same wording as the server's `explain`. */
function reasonSentence(r) {
  switch (r.type) {
    case "Queued": return "waiting to be scheduled";
    case "QuotaExhausted": return `queue ${r.queue} has used ${r.used} of its ${r.limit} ${r.flavor} GPUs`;
    case "InsufficientCapacity": {
      const fits = Object.entries(r.largestFitPerCluster || {}).map(([c, n]) => `${c}=${n}`).join(", ");
      return `needs ${r.needed} ${r.flavor} GPUs in one topology domain${fits ? `; largest fit per cluster: ${fits}` : ""}`;
    }
    case "Fragmentation": return `${r.freeTotal} GPUs are free but the largest topology domain has only ${r.largestDomain}`;
    case "NoMatchingCluster": return `no member cluster satisfies ${r.constraint}` +
      ((r.clustersFiltered || []).length ? ` (filtered out: ${r.clustersFiltered.join(", ")})` : "");
    case "WindowClosed": return `the quota window is closed until ${r.until}`;
    case "RateLimited": return "dispatch is rate limited";
    case "MemberUnavailable": return `member cluster ${r.cluster} is unavailable`;
    case "WaitingForPreemption": return `waiting for ${(r.victims || []).length} workload(s) to be preempted`;
    case "WindowClosing": return `the quota window closes at ${r.boundary} and its estimated ${r.estimateSeconds} s would outlast it`;
    case "BackingOff": return `retried after its backoff, at ${r.until}`;
    default: return r.type;
  }
}

function reasonText(w) {
  const st = w.status || {};
  if (st.pendingReason) return st.message || reasonSentence(st.pendingReason);
  return st.message || "";
}

function renderWorkloads() {
  const filter = document.getElementById("filter").value.trim().toLowerCase();
  const phase = document.getElementById("phase").value;
  const rank = (w) => PHASE_ORDER.indexOf(phaseOf(w));
  const submitted = (w) => Date.parse((w.status && w.status.submittedAt) || 0) || 0;
  let shown = workloads.filter((w) => {
    if (phase && phaseOf(w) !== phase) return false;
    if (!filter) return true;
    const hay = `${w.metadata.name} ${w.spec.queue} ${(w.status && w.status.cluster) || ""} ${w.spec.class}`.toLowerCase();
    return hay.includes(filter);
  });
  const active = shown.filter((w) => !TERMINAL.has(phaseOf(w)));
  const finished = shown.filter((w) => TERMINAL.has(phaseOf(w)))
    .sort((a, b) => submitted(b) - submitted(a)).slice(0, MAX_FINISHED_SHOWN);
  active.sort((a, b) => rank(a) - rank(b) || submitted(b) - submitted(a));
  shown = active.concat(finished);
  document.getElementById("wl-count").textContent =
    `${workloads.length} in all, ${workloads.filter((w) => !TERMINAL.has(phaseOf(w))).length} active` +
    (finished.length === MAX_FINISHED_SHOWN ? `, the latest ${MAX_FINISHED_SHOWN} finished shown` : "");
  const rows = shown.map((w) => {
    const st = w.status || {};
    const ph = phaseOf(w);
    return h("tr", { dataset: { workload: w.metadata.name, phase: ph }, onclick: () => select(w.metadata.name) },
      h("td", {}, w.metadata.name),
      h("td", {}, w.spec.queue),
      h("td", {}, w.spec.class),
      h("td", { class: "num" }, `${gpus(w)} ${flavors(w)}`),
      h("td", { class: "phase" }, badge(ph)),
      h("td", { class: "cluster" }, st.cluster || "—"),
      h("td", {}, ago(st.submittedAt)),
      h("td", { class: "reason" }, st.pendingReason ? [badge(st.pendingReason.type, "reason"), " ", reasonText(w)] : reasonText(w)));
  });
  replace(document.querySelector("#workloads tbody"), rows.length ? rows : h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No workloads.")));
}

async function renderPending() {
  const pending = workloads.filter((w) => phaseOf(w) === "Pending")
    .sort((a, b) => Date.parse(a.status?.submittedAt || 0) - Date.parse(b.status?.submittedAt || 0))
    .slice(0, MAX_EXPLAINED);
  const items = await Promise.all(pending.map(async (w) => {
    let ex = null;
    try {
      ex = await api(`/v1/workloads/${encodeURIComponent(w.metadata.name)}/explain`);
    } catch (_) { /* shown from the replicated reason alone */ }
    const summary = ex ? ex.summary : reasonText(w);
    const code = w.status?.pendingReason?.type || "Queued";
    return h("div", { class: "pending-item", dataset: { pending: w.metadata.name }, onclick: () => select(w.metadata.name) },
      h("b", {}, w.metadata.name), " ", badge(code, "reason"),
      h("span", { class: "muted" }, ` ${w.spec.queue} · ${gpus(w)} ${flavors(w)} · waiting ${ago(w.status?.submittedAt)}`),
      h("div", { class: "why" }, summary));
  }));
  const total = workloads.filter((w) => phaseOf(w) === "Pending").length;
  replace(document.getElementById("pending"),
    items.length ? items : h("p", { class: "muted" }, "Nothing is pending."),
    total > items.length ? h("p", { class: "muted" }, `…and ${total - items.length} more pending.`) : null);
}

async function renderDetail() {
  const aside = document.getElementById("detail");
  if (!selected) {
    aside.hidden = true;
    return;
  }
  aside.hidden = false;
  const body = document.getElementById("detail-body");
  let w;
  let ex = null;
  try {
    w = await api(`/v1/workloads/${encodeURIComponent(selected)}`);
  } catch (e) {
    replace(body, h("h2", {}, selected), h("p", { class: "error" }, String(e.message)));
    return;
  }
  try {
    ex = await api(`/v1/workloads/${encodeURIComponent(selected)}/explain`);
  } catch (_) { /* explain is best effort */ }
  const st = w.status || {};
  const s = w.spec;
  const dl = (pairs) => h("dl", {}, pairs.filter(([, v]) => v !== undefined && v !== null && v !== "")
    .flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  const verdicts = ex && ex.explanation && ex.explanation.clusters ? ex.explanation.clusters : [];
  replace(body,
    h("h2", {}, w.metadata.name, " ", badge(phaseOf(w))),
    dl([
      ["uid", w.metadata.uid],
      ["queue", s.queue], ["class", s.class], ["priority class", s.priorityClass], ["user", s.user],
      ["pod sets", s.podSets.map((p) => `${p.name}: ${p.count} × ${p.gpusPerPod} ${p.flavor}`).join("; ")],
      ["gang minimum", s.gang ? s.gang.minCount : null],
      ["topology", s.topology ? JSON.stringify(s.topology) : null],
      ["placement", s.placement ? JSON.stringify(s.placement) : null],
      ["runtime estimate", s.runtimeEstimateSeconds ? duration(s.runtimeEstimateSeconds) : null],
      ["cluster", st.cluster], ["attempts", st.attempts],
      ["submitted", st.submittedAt], ["admitted", st.admittedAt],
      ["started", st.startedAt], ["finished", st.finishedAt],
      ["message", st.message],
    ]),
    ex ? h("div", {},
      h("h3", {}, "Explain"),
      dl([["summary", ex.summary], ["decision", ex.decision], ["last cycle", ex.cycleAt],
        ["unblock", ex.explanation ? ex.explanation.hint : null]]),
      verdicts.length ? h("table", {},
        h("thead", {}, h("tr", {}, h("th", {}, "Cluster"), h("th", {}, "Verdict"))),
        h("tbody", {}, verdicts.map((v) => {
          const { type, ...rest } = v.verdict;
          const extra = Object.entries(rest).map(([k, x]) => `${k}=${x}`).join(" ");
          return h("tr", {}, h("td", {}, v.cluster), h("td", {}, type, " ", h("span", { class: "muted" }, extra)));
        }))) : null) : null,
    h("h3", {}, "Status"),
    h("pre", {}, JSON.stringify(st, null, 2)));
}

/** The tidal timeline, where the server has quota schedules; hidden when it has none. */
async function renderTidal() {
  const section = document.getElementById("tidal-section");
  if (!schedulesAvailable) return;
  let list;
  try {
    list = await api("/v1/schedules");
  } catch (e) {
    // 404: a server without the tidal engine. Stop asking; anything else may be transient.
    if (e instanceof HttpError && (e.status === 404 || e.status === 405)) schedulesAvailable = false;
    section.hidden = true;
    return;
  }
  // `GET /v1/schedules` answers an array of timelines (older servers: `{items: [...]}`).
  const items = Array.isArray(list) ? list : list.items || [];
  if (items.length === 0) {
    section.hidden = true;
    return;
  }
  section.hidden = false;
  const blocks = await Promise.all(items.map(async (s) => {
    const name = s.metadata ? s.metadata.name : s.schedule || s.name;
    let tl = null;
    try {
      tl = await api(`/v1/schedules/${encodeURIComponent(name)}/timeline`);
    } catch (_) { /* show the schedule without its timeline */ }
    return h("div", { dataset: { schedule: name } },
      h("b", {}, name), (s.spec && s.spec.timeZone) || s.timeZone ? h("span", { class: "muted" }, ` (${(s.spec && s.spec.timeZone) || s.timeZone})`) : null,
      tl ? timeline(tl) : h("p", { class: "muted" }, "timeline unavailable"));
  }));
  replace(document.getElementById("tidal"), blocks);
}

/**
 * Draws a schedule's timeline: windows on a time bar with now marked, the current window and the
 * next transition. Accepts the entries as the response itself or as any array in it, each with
 * a `start` (or `from`) and optionally an `end` (or `to`; else the next entry's start) and a
 * `window` name; consecutive entries of the same window are merged.
 */
function timeline(tl) {
  const arrays = Array.isArray(tl) ? [tl] : Object.values(tl || {}).filter((v) => Array.isArray(v));
  const entries = arrays.flat()
    .filter((x) => x && typeof x === "object" && (x.start || x.from))
    .map((x) => ({ start: Date.parse(x.start || x.from), end: x.end || x.to ? Date.parse(x.end || x.to) : null, window: x.window ?? x.name ?? null }))
    .filter((x) => !Number.isNaN(x.start))
    .sort((a, b) => a.start - b.start);
  const step = entries.length > 1 ? entries[1].start - entries[0].start : 3600e3;
  entries.forEach((x, i) => { if (x.end === null) x.end = i + 1 < entries.length ? entries[i + 1].start : x.start + step; });
  const segs = [];
  for (const x of entries) {
    const last = segs[segs.length - 1];
    if (last && last.window === x.window && last.end === x.start) last.end = x.end;
    else segs.push({ ...x });
  }
  const out = [];
  const now = serverNow();
  const label = (w) => w ?? "(no window: default quotas)";
  const cur = segs.find((x) => x.start <= now && now < x.end);
  const next = cur ? segs.find((x) => x.start >= cur.end) : segs.find((x) => x.start > now);
  // The hourly entries place a boundary only to the hour; the schedule's status has it exactly.
  const exact = Date.parse((tl && tl.status && tl.status.nextTransitionAt) || "");
  const boundary = (fallback) => new Date(Number.isNaN(exact) ? fallback : exact).toLocaleString();
  if (cur) out.push(h("div", { class: "tl-current" }, "current window: ", h("b", {}, label(cur.window)), ` until ${boundary(cur.end)}`));
  if (next) out.push(h("div", { class: "tl-next" }, "next transition: ", h("b", {}, label(next.window)), ` at ${boundary(next.start)}`));
  if (segs.length) {
    const t0 = segs[0].start;
    const width = Math.max(1, segs[segs.length - 1].end - t0);
    const names = [...new Set(segs.map((x) => x.window))];
    const bar = h("div", { class: "timeline" });
    for (const x of segs) {
      const el = h("div", { class: `win c${names.indexOf(x.window) % 4}`, title: `${label(x.window)}: ${new Date(x.start).toLocaleString()} – ${new Date(x.end).toLocaleString()}` }, x.window || "");
      el.style.left = `${(100 * (x.start - t0)) / width}%`;
      el.style.width = `${(100 * (x.end - x.start)) / width}%`;
      bar.append(el);
    }
    if (now >= t0 && now <= t0 + width) {
      const n = h("div", { class: "now", title: "now" });
      n.style.left = `${(100 * (now - t0)) / width}%`;
      bar.append(n);
    }
    out.push(bar);
  }
  if (out.length === 0) out.push(h("pre", {}, JSON.stringify(tl, null, 2)));
  return h("div", {}, out);
}

async function loadWorkloads() {
  const all = [];
  let after = null;
  for (let i = 0; i < MAX_PAGES; i++) {
    const page = await api(`/v1/workloads?limit=1000${after === null ? "" : `&after=${after}`}`);
    all.push(...page.items);
    if (page.continue === undefined || page.continue === null) break;
    after = page.continue;
  }
  return all;
}

function select(name) {
  selected = name;
  renderDetail();
}

// ---------- the loop ----------

async function refresh() {
  const errors = [];
  const settle = async (what, f) => {
    try {
      await f();
    } catch (e) {
      errors.push(`${what}: ${e.message}`);
    }
  };
  await Promise.all([
    settle("cluster", async () => renderRaft(await api("/v1/cluster/status?digest=false"))),
    settle("capacity", async () => renderCapacity(await api("/v1/capacity"))),
    settle("members", async () => renderMembers(await api("/v1/members"))),
    settle("workloads", async () => { workloads = await loadWorkloads(); }),
  ]);
  await Promise.all([
    settle("queues", async () => renderQueues(await api("/v1/queues"))),
    settle("workloads", async () => renderWorkloads()),
    settle("explain", renderPending),
    settle("schedules", renderTidal),
    settle("detail", renderDetail),
  ]);
  const banner = document.getElementById("error");
  banner.hidden = errors.length === 0;
  banner.textContent = errors.join(" · ");
  // The fleet's time, not the browser's: under a dev clock they differ, and every age on the page
  // is measured against the fleet's.
  const refreshed = document.getElementById("refreshed");
  refreshed.textContent = `updated ${new Date(serverNow()).toLocaleTimeString()} (fleet clock)`;
  refreshed.dataset.fleetNow = new Date(serverNow()).toISOString();
  document.body.dataset.loaded = "true";
}

async function loop() {
  if (!paused) await refresh();
  setTimeout(loop, REFRESH_MS);
}

document.getElementById("pause").addEventListener("click", (e) => {
  paused = !paused;
  e.target.textContent = paused ? "Resume" : "Pause";
});
document.getElementById("close-detail").addEventListener("click", () => { selected = null; renderDetail(); });
document.getElementById("filter").addEventListener("input", renderWorkloads);
document.getElementById("phase").addEventListener("change", renderWorkloads);
loop();
