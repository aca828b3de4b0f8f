// Overview: the whole box, polled every few seconds while the view is open (an admin key's, or any on a box
// without keys).
import { describe, el, getJson, ms, percent, table } from "./api.js";
import { lineChart } from "./charts.js";

const POLL_MS = 3000;
// the request path's stages, as /metrics names them (appliance_stage_seconds), in pipeline order
const STAGES_SHOWN = ["total", "rewrite", "exact_cache", "encode", "semantic_cache", "bm25", "ann", "fuse",
  "late_interaction", "answerable", "queue_wait", "ttft", "generation"];

export function overviewView(root) {
  let timer = null, last = null, polling = false;
  const log = [];  // engine state changes seen between polls, newest first
  const body = el("div", { class: "overview" }, el("p", { class: "muted" }, "Loading…"));
  root.replaceChildren(el("h2", {}, "Overview"), body);

  async function poll() {
    if (polling) return;  // a slow answer: the next tick waits for it instead of piling up
    polling = true;
    try {
      const data = await getJson("/v1/admin/overview");
      noteChanges(last, data, log);
      last = data;
      body.replaceChildren(...render(data, log));
    } catch (err) {
      body.replaceChildren(el("p", { class: "error", role: "alert" }, describe(err)),
                           ...(last ? render(last, log, true) : []));
    } finally {
      polling = false;
    }
  }

  return {
    show() {
      poll();
      timer = setInterval(() => { if (document.visibilityState === "visible") poll(); }, POLL_MS);
    },
    hide() { clearInterval(timer); timer = null; },
  };
}

function noteChanges(before, now, log) {
  if (!before) return;
  const time = new Date().toLocaleTimeString();
  for (const [role, e] of Object.entries(now.engines)) {
    const was = before.engines[role];
    if (!was) continue;
    if (was.state !== e.state) log.unshift(`${time}: engine ${role} ${was.state} → ${e.state}`);
    if (e.restarts > was.restarts) log.unshift(`${time}: engine ${role} restarted (${e.restarts} restarts)`);
  }
  if (before.status !== now.status) log.unshift(`${time}: appliance ${before.status} → ${now.status}`);
  log.splice(20);
}

function render(d, log, stale = false) {
  const ready = d.status === "ready";
  const status = el("p", { class: `status ${ready ? "ok" : "warn"}`, "data-status": d.status },
    ready ? `Ready (boot ${ms(d.boot_ms)}, of which warm-up ${ms(sum(Object.values(d.warm_up_ms || {})))})` :
      d.status === "starting" ? "Warming up: the models and indexes are loading" :
        `${d.status}${d.error ? `: ${d.error}` : ""}`,
    stale ? " — figures from the last poll that worked" : "");
  return [
    status,
    el("h3", {}, "Engines"), engines(d.engines, ready),
    el("h3", {}, "Caches"), caches(d.caches),
    el("h3", {}, `Traffic, last ${Math.round(d.window_s / 60)} minutes`), traffic(d),
    el("h3", {}, "Indexing"), indexing(d.indexing),
    el("h3", {}, "Events"),
    log.length ? el("ul", { class: "events" }, log.map((line) => el("li", {}, line)))
      : el("p", { class: "muted" }, "No engine changes seen since this page opened."),
  ];
}

const sum = (values) => values.reduce((a, b) => a + b, 0);

function engines(list, ready) {
  const rows = Object.entries(list);
  if (!rows.length) {
    return el("p", { class: "muted" }, ready ? "Generation is off: answers are retrieval-only." : "Not started yet.");
  }
  return table(["Engine", "State", "Model", "Running", "Waiting", "KV cache", "Prefix-cache hits",
                "TTFT p50 / p99", "Restarts"],
    rows.map(([role, e]) => [
      role,
      el("span", { class: `state ${e.state === "up" ? "ok" : "bad"}`, "data-engine": role, "data-state": e.state },
         e.state),
      e.model, e.running, e.waiting, percent(e.kv_cache_usage), percent(e.prefix_cache_hit_rate),
      `${ms(e.ttft_p50_ms)} / ${ms(e.ttft_p99_ms)}`,
      el("span", { "data-restarts": role }, String(e.restarts)),
    ]));
}

function caches(c) {
  const layers = ["exact", "semantic", "none"];
  const answered = layers.reduce((n, l) => n + (c.answers[l] || 0), 0);
  const entries = c.entries || {};
  const held = (n) => (n === null || n === undefined ? "off" : String(n));
  return table(["Layer", "Answers in window", "Share", "Entries"], [
    ...layers.map((l) => [l === "none" ? "miss (answered afresh)" : `${l} hit`, c.answers[l] || 0,
                          answered ? percent(c.hit_rate[l] || 0) : "–", l === "none" ? "" : held(entries[l])]),
    ["question embeddings", "", "", held(entries.embeddings)],
  ]);
}

function traffic(d) {
  const points = d.series;
  const charts = [lineChart("Requests/s", [{ values: points.map((p) => p.rps), cls: "rps" }], (v) => v.toFixed(2))];
  const stages = STAGES_SHOWN.filter((s) => points.some((p) => s in p.p50_ms));
  for (const stage of stages) {
    charts.push(lineChart(`${stage} p50 / p99`, [
      { values: points.map((p) => p.p50_ms[stage] ?? null), cls: "p50" },
      { values: points.map((p) => p.p99_ms[stage] ?? null), cls: "p99" },
    ], ms));
  }
  const rejected = Object.entries(d.totals.rejected).map(([why, n]) => `${why} ${n}`).join(", ") || "none";
  return el("div", {},
    el("p", {}, `${d.totals.requests} requests, ${d.in_flight} others in progress now; degraded answers `,
      el("strong", { "data-total": "degraded" }, String(d.totals.degraded)), `; refused: ${rejected}.`),
    el("div", { class: "charts" }, charts),
    stages.length ? null : el("p", { class: "muted" }, "No requests in the window yet."));
}

function indexing(list) {
  if (!list.length) return el("p", { class: "muted" }, "Every partition is searchable at its latest version.");
  return table(["Tenant", "Partition", "Stored version", "Searchable version"],
    list.map((p) => [p.tenant, p.partition, p.version, p.indexed_version]));
}
