// The operators' dashboard charts, drawn by uPlot (vendored: static/vendor/uPlot.esm.js).
// Time series as lines or bars (stacked or side by side) and a breakdown as horizontal bars.
// Hovering a chart shows the values at that point in its legend; a threshold such as the
// compaction trigger is a dashed guide line. Each chart container says how many values it drew
// (`data-points`, 0 with the "no data" note) and is redrawn in place on every load.

import uPlot from "../vendor/uPlot.esm.js";
import { t } from "./i18n.js";

const HEIGHT = 200;
const ROW_HEIGHT = 26;
const plots = new WeakMap();
const resized = new ResizeObserver((entries) => {
  for (const { target } of entries) {
    const plot = plots.get(target);
    if (plot && target.clientWidth) plot.setSize({ width: target.clientWidth, height: plot.height });
  }
});

function theme() {
  const style = getComputedStyle(document.documentElement);
  const read = (name) => style.getPropertyValue(name).trim();
  return {
    series: [read("--accent"), read("--danger"), read("--compact")],
    muted: read("--muted"),
    border: read("--border"),
    warn: read("--warn"),
    font: `11px ${read("--font") || "sans-serif"}`,
  };
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function empty(container, message) {
  plots.get(container)?.destroy();
  plots.delete(container);
  const note = document.createElement("p");
  note.className = "chart-empty muted";
  note.textContent = message;
  container.replaceChildren(note);
  container.dataset.points = "0";
}

function mount(container, options, data, points) {
  plots.get(container)?.destroy();
  container.replaceChildren();
  const plot = new uPlot({ width: container.clientWidth || 480, ...options }, data, container);
  plots.set(container, plot);
  resized.observe(container);
  container.dataset.points = String(points);
}

function axis(colors, format, extra = {}) {
  return {
    stroke: colors.muted,
    font: colors.font,
    grid: { stroke: colors.border, width: 1 },
    ticks: { stroke: colors.border, width: 1 },
    values: format ? (_, ticks) => ticks.map(format) : undefined,
    ...extra,
  };
}

// Dashed horizontal lines at fixed values (drawn after the series, inside the plot).
function guideHook(guides, colors) {
  return (u) => {
    const { ctx, bbox } = u;
    const ratio = window.devicePixelRatio || 1;
    for (const guide of guides) {
      const y = u.valToPos(guide.value, "y", true);
      if (y < bbox.top || y > bbox.top + bbox.height) continue;
      ctx.save();
      ctx.strokeStyle = colors.warn;
      ctx.lineWidth = ratio;
      ctx.setLineDash([4 * ratio, 3 * ratio]);
      ctx.beginPath();
      ctx.moveTo(bbox.left, y);
      ctx.lineTo(bbox.left + bbox.width, y);
      ctx.stroke();
      ctx.fillStyle = colors.muted;
      ctx.font = colors.font.replace(/^\d+px/, `${11 * ratio}px`);
      ctx.textAlign = "right";
      ctx.fillText(guide.label, bbox.left + bbox.width, y - 3 * ratio);
      ctx.restore();
    }
  };
}

// series: [{name, values: [number|null]}]; labels: ISO bucket starts (or turn times).
export function timeChart(container, { labels, series, kind = "line", stacked = false, format = String, max, guides = [] }) {
  const drawn = (v) => v != null && (kind === "line" || v > 0);
  const points = series.reduce((sum, s) => sum + s.values.filter(drawn).length, 0);
  if (!points) return empty(container, t("No data in this window."));
  const colors = theme();
  // Stacked bars: each series is drawn up to the running total, the totals first, so the lower
  // parts stay visible in front.
  let heights = series.map((s) => s.values);
  if (stacked) {
    const totals = labels.map(() => 0);
    heights = series.map((s) => s.values.map((v, i) => (totals[i] += v ?? 0)));
  }
  const highest = Math.max(...heights.flat().filter((v) => v != null), ...guides.map((g) => g.value));
  const top = max ?? niceMax(highest);
  // Values above a fixed top sit on the top edge; the legend still shows the real value.
  const clamp = (values) => values.map((v) => (v == null ? null : Math.min(v, top)));
  const times = labels.map((iso) => Date.parse(iso) / 1000);
  const order = series.map((_, index) => index);
  if (stacked) order.reverse();
  const bars = (index) =>
    stacked || series.length === 1
      ? uPlot.paths.bars({ size: [0.8, 40] })
      : uPlot.paths.bars({ size: [0.8 / series.length, 40], align: index === 0 ? -1 : 1 });
  mount(
    container,
    {
      height: HEIGHT,
      // A single point (one turn) gets an hour either side (uPlot would give it 1,000 days).
      scales: { x: { time: true, range: (_, low, high) => (times.length === 1 ? [times[0] - 3600, times[0] + 3600] : [low, high]) }, y: { range: () => [0, top] } },
      axes: [axis(colors), axis(colors, format, { size: 56 })],
      legend: { live: true },
      cursor: { points: { show: kind === "line" } },
      series: [
        {},
        ...order.map((index) => ({
          label: series[index].name,
          stroke: colors.series[index],
          fill: kind === "bar" ? colors.series[index] : undefined,
          width: kind === "bar" ? 0 : 2,
          paths: kind === "bar" ? bars(index) : undefined,
          points: { show: kind === "line", size: 5 },
          value: (_, __, ___, idx) => (idx == null || series[index].values[idx] == null ? "—" : format(series[index].values[idx])),
        })),
      ],
      hooks: { draw: [guideHook(guides, colors)] },
    },
    [times, ...order.map((index) => clamp(heights[index]))],
    points,
  );
}

// items: [{label, value}] drawn as horizontal bars (a snapshot's breakdown by source).
export function barList(container, items, format = String) {
  const shown = items.filter((item) => item.value > 0);
  if (!shown.length) return empty(container, t("No snapshot stored."));
  const colors = theme();
  const rows = shown.map((_, index) => index);
  mount(
    container,
    {
      height: shown.length * ROW_HEIGHT + 50,
      // The category axis runs down the left side, first item on top; values along the bottom.
      scales: { x: { time: false, ori: 1, dir: -1, range: [-0.5, shown.length - 0.5] }, y: { ori: 0, range: (_, __, high) => [0, niceMax(high)] } },
      axes: [
        axis(colors, null, { side: 3, size: 110, grid: { show: false }, splits: () => rows, values: (_, ticks) => ticks.map((i) => shown[i]?.label ?? "") }),
        axis(colors, format, { side: 2 }),
      ],
      legend: { live: true },
      cursor: { points: { show: false } },
      series: [
        { label: t("Source"), value: (_, index) => shown[index]?.label ?? "—" },
        {
          label: t("tokens"),
          stroke: colors.series[0],
          fill: colors.series[0],
          width: 0,
          paths: uPlot.paths.bars({ size: [0.7, 18] }),
          points: { show: false },
          value: (_, value) => (value == null ? "—" : format(value)),
        },
      ],
    },
    [rows, shown.map((item) => item.value)],
    shown.length,
  );
}
