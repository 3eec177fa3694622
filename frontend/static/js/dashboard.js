// The operators' context dashboard: totals, charts over a chosen window, the conversations
// under the most pressure, and a per-conversation drill-down. Data: /api/metrics/summary and
// /api/metrics/conversations/{id} (aggregated in SQL by the backend).

import { ApiError, api } from "./api.js";
import { barList, timeChart } from "./dashboard-charts.js";
import { formatDecimal, formatInt, formatPercent, formatTime, formatTokens, h } from "./format.js";
import { t } from "./i18n.js";
import { COMPACTION_STATUS, STATE_LABELS } from "./meter.js";

const WINDOWS = ["1h", "6h", "24h", "7d", "30d"];
// The stored names, as the page says them (English keeps the names).
const STRATEGIES = {
  summary_compact: t("summary_compact"),
  summary_ahead: t("summary_ahead"),
  emergency_truncate: t("emergency_truncate"),
  tail_drop: t("tail_drop"),
};
const SOURCES = {
  system: t("system"),
  overhead: t("overhead"),
  tool_schemas: t("tool schemas"),
  history: t("history"),
  tool_outputs: t("tool outputs"),
  attachments: t("attachments"),
  summary: t("summary"),
  current_input: t("current input"),
};
const $ = (id) => document.getElementById(id);

const percent = (v) => (v == null ? "—" : formatPercent(Math.round(v * 100)));
// Seconds from what would round to 1,000 ms (999.6 ms reads "1.0 s", never "1,000 ms").
const ms = (v) => (v == null ? "—" : Math.round(v) >= 1000 ? t("{value} s", { value: formatDecimal(v / 1000, 1) }) : t("{value} ms", { value: formatDecimal(v, 0) }));
const ratio = (v) => (v == null ? "—" : formatDecimal(v, 2));

const params = new URLSearchParams(location.search);
let current = params.get("window");
// `?conversation=<id>` opens that conversation's drill-down (a link from elsewhere).
const linked = Number(params.get("conversation")) || null;
if (!WINDOWS.includes(current)) current = "24h";

function tile(label, value, note) {
  return h("div", { class: "tile" }, h("span", { class: "tile-label" }, label), h("strong", { class: "tile-value" }, value), note ? h("span", { class: "tile-note muted" }, note) : null);
}

function renderTiles(totals) {
  $("tiles").replaceChildren(
    tile(t("Turns"), formatInt(totals.turns), t("{count} running now", { count: formatInt(totals.running_turns) })),
    tile(t("Peak utilisation"), percent(totals.utilization_max)),
    tile(t(t("Compactions")), formatInt(totals.compactions), `${formatInt(totals.compactions_completed)} completed`),
    tile(t("Success rate"), percent(totals.compaction_success_rate)),
    tile(t("Tokens saved"), formatTokens(totals.tokens_saved)),
    tile(t("Compaction p50 / p95"), `${ms(totals.compaction_duration_p50_ms)} / ${ms(totals.compaction_duration_p95_ms)}`),
    tile(t("Refusals"), formatInt(totals.refusals), t("{count} failed turns", { count: formatInt(totals.failed_turns) })),
    tile(t("Overflow errors"), formatInt(totals.overflow_errors)),
    tile(t("TTFT p50 / p95"), `${ms(totals.ttft_p50_ms)} / ${ms(totals.ttft_p95_ms)}`),
    tile(t("Retention score"), ratio(totals.retention_avg)),
  );
}

function column(points, key) {
  return points.map((p) => (p[key] == null ? null : p[key]));
}

// The compaction trigger's default, drawn on the utilisation charts.
const TRIGGER = [{ value: 0.85, label: t("default trigger 85%") }];
// Refused requests can be many times the window; above 150% points sit on the top edge.
const utilisationTop = (values) => Math.min(1.5, Math.max(1, ...values.filter((v) => v != null)));

// The window's charts: which series of `turns` or `compactions` each draws ([key, legend name]).
const CHARTS = [
  { id: "chart-utilization", from: "turns", series: [["utilization_avg", t("average")], ["utilization_max", t("highest")]], format: percent, utilisation: true },
  { id: "chart-compactions", from: "compactions", kind: "bar", stacked: true, series: [["completed", t("completed")], ["fallback", t("fallback")]], format: formatInt },
  { id: "chart-saved", from: "compactions", kind: "bar", series: [["tokens_saved", t("tokens saved")]], format: formatTokens },
  { id: "chart-duration", from: "compactions", series: [["duration_p50_ms", t("p50")], ["duration_p95_ms", t("p95")]], format: ms },
  { id: "chart-errors", from: "turns", kind: "bar", series: [["refusals", t("refusals")], ["overflow_errors", t("overflow errors")]], format: formatInt },
  { id: "chart-ttft", from: "turns", series: [["ttft_p50_ms", t("p50")], ["ttft_p95_ms", t("p95")]], format: ms },
  { id: "chart-retention", from: "compactions", series: [["retention_avg", t("average")], ["retention_min", t("lowest")]], format: ratio, max: 1 },
];

function renderCharts(data) {
  for (const { id, from, series, utilisation, ...drawing } of CHARTS) {
    const points = data[from];
    const values = series.map(([key, name]) => ({ name, values: column(points, key) }));
    const scale = utilisation ? { max: utilisationTop(values.at(-1).values), guides: TRIGGER } : {};
    timeChart($(id), { labels: points.map((p) => p.start), series: values, ...drawing, ...scale });
  }
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

function renderMcpTools(rows) {
  $("mcp-tools-table").querySelector("tbody").replaceChildren(
    ...rows.map((row) =>
      h(
        "tr",
        { class: "mcp-tool-row", dataset: { server: row.server, tool: row.tool } },
        h("td", {}, row.server),
        h("td", {}, row.tool),
        h("td", {}, formatInt(row.calls)),
        h("td", {}, formatInt(row.errors)),
        h("td", {}, formatInt(row.timeouts)),
        h("td", {}, ms(row.duration_p50_ms)),
        h("td", {}, ms(row.duration_p95_ms)),
      ),
    ),
  );
  $("mcp-tools-empty").hidden = rows.length > 0;
}

async function drillDown(conversationId) {
  const panel = $("drill");
  panel.hidden = false;
  panel.dataset.loaded = "false";
  $("drill-title").textContent = t("Conversation #{conversation_id}", { conversation_id: conversationId });
  let detail;
  try {
    detail = await api.get(`/api/metrics/conversations/${conversationId}`);
  } catch (error) {
    $("drill-tiles").replaceChildren(h("p", { class: "form-error" }, error instanceof ApiError ? error.message : String(error)));
    return;
  }
  const snapshot = detail.latest_snapshot;
  $("drill-tiles").replaceChildren(
    tile(t("Model"), detail.model_profile ?? "—"),
    tile(t("Latest used / available"), snapshot ? `${formatTokens(snapshot.used_input)} / ${formatTokens(snapshot.available_input)}` : "—"),
    tile(t("State"), snapshot ? (STATE_LABELS[snapshot.state] ?? snapshot.state) : "—"),
    tile(t("Trigger / keep"), snapshot ? `${formatTokens(snapshot.trigger)} / ${formatTokens(snapshot.keep)}` : "—"),
    tile(t("Turns shown"), formatInt(detail.turns.length)),
    tile(t("Compactions"), formatInt(detail.compactions.length)),
  );
  barList(
    $("drill-breakdown"),
    Object.entries(SOURCES).map(([source, label]) => ({ label, value: snapshot?.breakdown?.[source] ?? 0 })),
    formatTokens,
  );
  const utilisation = column(detail.turns, "utilization");
  timeChart($("drill-turns"), {
    labels: detail.turns.map((t) => t.started_at),
    series: [{ name: t("utilisation"), values: utilisation }],
    format: percent,
    max: utilisationTop(utilisation),
    guides: TRIGGER,
  });
  $("drill-compactions").querySelector("tbody").replaceChildren(
    ...detail.compactions.map((c) =>
      h(
        "tr",
        { dataset: { status: c.status } },
        h("td", {}, formatTime(c.created_at)),
        h("td", {}, STRATEGIES[c.strategy] ?? c.strategy),
        h("td", {}, COMPACTION_STATUS[c.status] ?? c.status),
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
  $("dash-status").textContent = t("Loading…");
  try {
    const data = await api.get(`/api/metrics/summary?window=${current}`);
    renderTiles(data.totals);
    renderCharts(data);
    renderPressure(data.pressure);
    renderMcpTools(data.mcp_tools);
    $("dash-status").textContent = t("{start} – {end}", { start: formatTime(data.window.start), end: formatTime(data.window.end) });
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
if (linked) drillDown(linked);
