// The operators' context dashboard: totals, charts over a chosen window, the conversations
// under the most pressure, and a per-conversation drill-down. Data: /api/metrics/summary and
// /api/metrics/conversations/{id} (aggregated in SQL by the backend).

import { ApiError, api } from "./api.js";
import { barList, timeChart } from "./charts.js";
import { formatInt, formatTime, formatTokens, h } from "./format.js";

const WINDOWS = ["1h", "6h", "24h", "7d", "30d"];
const SOURCES = ["system", "tool_schemas", "history", "tool_outputs", "attachments", "summary", "current_input"];
const $ = (id) => document.getElementById(id);

const percent = (v) => (v == null ? "—" : `${Math.round(v * 100)}%`);
const ms = (v) => (v == null ? "—" : v >= 1000 ? `${(v / 1000).toFixed(1)} s` : `${Math.round(v)} ms`);
const ratio = (v) => (v == null ? "—" : v.toFixed(2));

let current = new URLSearchParams(location.search).get("window");
if (!WINDOWS.includes(current)) current = "24h";

function tile(label, value, note) {
  return h("div", { class: "tile" }, h("span", { class: "tile-label" }, label), h("strong", { class: "tile-value" }, value), note ? h("span", { class: "tile-note muted" }, note) : null);
}

function renderTiles(totals) {
  $("tiles").replaceChildren(
    tile("Turns", formatInt(totals.turns), `${formatInt(totals.running_turns)} running now`),
    tile("Peak utilisation", percent(totals.utilization_max)),
    tile("Compactions", formatInt(totals.compactions), `${formatInt(totals.compactions_completed)} completed`),
    tile("Success rate", percent(totals.compaction_success_rate)),
    tile("Tokens saved", formatTokens(totals.tokens_saved)),
    tile("Compaction p50 / p95", `${ms(totals.compaction_duration_p50_ms)} / ${ms(totals.compaction_duration_p95_ms)}`),
    tile("Refusals", formatInt(totals.refusals), `${formatInt(totals.failed_turns)} failed turns`),
    tile("Overflow errors", formatInt(totals.overflow_errors)),
    tile("TTFT p50 / p95", `${ms(totals.ttft_p50_ms)} / ${ms(totals.ttft_p95_ms)}`),
    tile("Retention score", ratio(totals.retention_avg)),
  );
}

function column(points, key) {
  return points.map((p) => (p[key] == null ? null : p[key]));
}

function renderCharts(data) {
  const labels = data.turns.map((p) => p.start);
  const turns = data.turns;
  const compactions = data.compactions;
  timeChart($("chart-utilization"), {
    labels,
    series: [
      { name: "average", values: column(turns, "utilization_avg") },
      { name: "highest", values: column(turns, "utilization_max") },
    ],
    format: percent,
    // Refused requests can be many times the window; above 150% points sit on the top edge.
    max: Math.min(1.5, Math.max(1, ...column(turns, "utilization_max").filter((v) => v != null))),
    guides: [{ value: 0.85, label: "default trigger 85%" }],
  });
  timeChart($("chart-compactions"), {
    labels,
    kind: "bar",
    stacked: true,
    series: [
      { name: "completed", values: column(compactions, "completed") },
      { name: "fallback", values: column(compactions, "fallback") },
    ],
    format: formatInt,
  });
  timeChart($("chart-saved"), {
    labels,
    kind: "bar",
    series: [{ name: "tokens saved", values: column(compactions, "tokens_saved") }],
    format: formatTokens,
  });
  timeChart($("chart-duration"), {
    labels,
    series: [
      { name: "p50", values: column(compactions, "duration_p50_ms") },
      { name: "p95", values: column(compactions, "duration_p95_ms") },
    ],
    format: ms,
  });
  timeChart($("chart-errors"), {
    labels,
    kind: "bar",
    series: [
      { name: "refusals", values: column(turns, "refusals") },
      { name: "overflow errors", values: column(turns, "overflow_errors") },
    ],
    format: formatInt,
  });
  timeChart($("chart-ttft"), {
    labels,
    series: [
      { name: "p50", values: column(turns, "ttft_p50_ms") },
      { name: "p95", values: column(turns, "ttft_p95_ms") },
    ],
    format: ms,
  });
  timeChart($("chart-retention"), {
    labels,
    series: [
      { name: "average", values: column(compactions, "retention_avg") },
      { name: "lowest", values: column(compactions, "retention_min") },
    ],
    format: ratio,
    max: 1,
  });
}

function renderPressure(rows) {
  const body = $("pressure-table").querySelector("tbody");
  body.replaceChildren(
    ...rows.map((row) => {
      const meter = h("span", { class: "util-bar" }, h("span", { class: "util-fill", dataset: { level: row.utilization >= 1 ? "over" : row.utilization >= 0.85 ? "high" : "ok" } }));
      meter.firstChild.style.width = `${Math.min(100, Math.round((row.utilization ?? 0) * 100))}%`;
      const tr = h(
        "tr",
        { tabindex: "0", class: "pressure-row", dataset: { conversation: row.conversation_id } },
        h("td", {}, `#${row.conversation_id}`),
        h("td", {}, row.model_profile ?? "—"),
        h("td", {}, `${formatTokens(row.used_input)} / ${formatTokens(row.available_input)}`),
        h("td", {}, meter, ` ${percent(row.utilization)}`),
        h("td", {}, formatInt(row.turns)),
        h("td", {}, `${formatInt(row.compactions_completed)} / ${formatInt(row.compactions)}`),
        h("td", {}, formatInt(row.refusals)),
        h("td", {}, formatInt(row.overflow_errors)),
        h("td", {}, formatTime(row.last_turn_at)),
      );
      const open = () => drillDown(row.conversation_id);
      tr.addEventListener("click", open);
      tr.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          open();
        }
      });
      return tr;
    }),
  );
  $("pressure-empty").hidden = rows.length > 0;
}

async function drillDown(conversationId) {
  const panel = $("drill");
  panel.hidden = false;
  panel.dataset.loaded = "false";
  $("drill-title").textContent = `Conversation #${conversationId}`;
  let detail;
  try {
    detail = await api.get(`/api/metrics/conversations/${conversationId}`);
  } catch (error) {
    $("drill-tiles").replaceChildren(h("p", { class: "form-error" }, error instanceof ApiError ? error.message : String(error)));
    return;
  }
  const snapshot = detail.latest_snapshot;
  $("drill-tiles").replaceChildren(
    tile("Model", detail.model_profile ?? "—"),
    tile("Latest used / available", snapshot ? `${formatTokens(snapshot.used_input)} / ${formatTokens(snapshot.available_input)}` : "—"),
    tile("State", snapshot?.state ?? "—"),
    tile("Trigger / keep", snapshot ? `${formatTokens(snapshot.trigger)} / ${formatTokens(snapshot.keep)}` : "—"),
    tile("Turns shown", formatInt(detail.turns.length)),
    tile("Compactions", formatInt(detail.compactions.length)),
  );
  barList(
    $("drill-breakdown"),
    SOURCES.map((source) => ({ label: source.replace("_", " "), value: snapshot?.breakdown?.[source] ?? 0 })),
    formatTokens,
  );
  timeChart($("drill-turns"), {
    labels: detail.turns.map((t) => t.started_at),
    series: [{ name: "utilisation", values: detail.turns.map((t) => t.utilization) }],
    format: percent,
    max: Math.min(1.5, Math.max(1, ...detail.turns.map((t) => t.utilization ?? 0))),
    guides: [{ value: 0.85, label: "default trigger 85%" }],
  });
  $("drill-compactions").querySelector("tbody").replaceChildren(
    ...detail.compactions.map((c) =>
      h(
        "tr",
        { dataset: { status: c.status } },
        h("td", {}, formatTime(c.created_at)),
        h("td", {}, c.strategy),
        h("td", {}, c.status),
        h("td", {}, `${formatTokens(c.before_tokens)} → ${formatTokens(c.after_tokens)}`),
        h("td", {}, formatTokens(c.tokens_saved)),
        h("td", {}, ms(c.duration_ms)),
        h("td", {}, ratio(c.retention_score)),
        h("td", {}, c.failure_reason ?? ""),
      ),
    ),
  );
  panel.dataset.loaded = "true";
  panel.scrollIntoView({ block: "start" });
}

async function load() {
  const root = $("dashboard");
  root.setAttribute("aria-busy", "true");
  for (const button of $("window-picker").querySelectorAll("button")) {
    button.setAttribute("aria-checked", String(button.dataset.window === current));
  }
  $("dash-status").textContent = "Loading…";
  try {
    const data = await api.get(`/api/metrics/summary?window=${current}`);
    renderTiles(data.totals);
    renderCharts(data);
    renderPressure(data.pressure);
    $("dash-status").textContent = `${formatTime(data.window.start)} – ${formatTime(data.window.end)}`;
    root.dataset.loaded = "true";
    root.dataset.window = current;
  } catch (error) {
    $("dash-status").textContent = error instanceof ApiError ? error.message : String(error);
  } finally {
    root.setAttribute("aria-busy", "false");
  }
}

$("window-picker").addEventListener("click", (event) => {
  const button = event.target.closest("button[data-window]");
  if (!button || button.dataset.window === current) return;
  current = button.dataset.window;
  history.replaceState(null, "", `?window=${current}`);
  $("dashboard").dataset.loaded = "false";
  load();
});
$("refresh").addEventListener("click", () => load());
$("drill-close").addEventListener("click", () => {
  $("drill").hidden = true;
});

load();
