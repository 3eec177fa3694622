// Small SVG charts for the operators' dashboard: time series as lines or (stacked) bars, and
// horizontal bars for a breakdown. No library; every chart is a fresh <svg> with one element
// per drawn point, a <title> tooltip each, and `data-points` counting what was drawn.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 640;
const HEIGHT = 200;
const PAD = { left: 52, right: 12, top: 10, bottom: 26 };

function el(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text != null) node.textContent = text;
  return node;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function shortTime(iso, spanSeconds) {
  const date = new Date(iso);
  if (spanSeconds <= 2 * 86400) return date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
  return date.toLocaleDateString(undefined, { month: "short", day: "numeric" });
}

function frame(labels, max, format, guides) {
  const svg = el("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "chart-svg", role: "img" });
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const x = (i) => PAD.left + (labels.length <= 1 ? plotW / 2 : (i / (labels.length - 1)) * plotW);
  const y = (v) => PAD.top + plotH - (Math.min(v, max) / max) * plotH;
  for (const fraction of [0, 0.5, 1]) {
    const value = max * fraction;
    svg.append(el("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(value), y2: y(value), class: "grid" }));
    svg.append(el("text", { x: PAD.left - 6, y: y(value) + 4, class: "axis", "text-anchor": "end" }, format(value)));
  }
  for (const guide of guides) {
    if (guide.value > max) continue;
    svg.append(el("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(guide.value), y2: y(guide.value), class: "guide" }));
    svg.append(el("text", { x: WIDTH - PAD.right, y: y(guide.value) - 3, class: "axis", "text-anchor": "end" }, guide.label));
  }
  const span = labels.length > 1 ? (new Date(labels.at(-1)) - new Date(labels[0])) / 1000 : 0;
  const ticks = [
    [0, "start"],
    [Math.floor((labels.length - 1) / 2), "middle"],
    [labels.length - 1, "end"],
  ];
  for (const [i, anchor] of ticks) {
    if (labels[i] == null) continue;
    svg.append(el("text", { x: x(i), y: HEIGHT - 6, class: "axis", "text-anchor": anchor }, shortTime(labels[i], span)));
  }
  return { svg, x, y, plotW };
}

function legend(series) {
  const list = document.createElement("ul");
  list.className = "legend";
  series.forEach((s, index) => {
    const item = document.createElement("li");
    const swatch = document.createElement("span");
    swatch.className = `swatch s${index}`;
    item.append(swatch, s.name);
    list.append(item);
  });
  return list;
}

function empty(container, message) {
  container.replaceChildren();
  const note = document.createElement("p");
  note.className = "chart-empty muted";
  note.textContent = message;
  container.append(note);
  container.dataset.points = "0";
}

// series: [{name, values: [number|null]}]; labels: ISO bucket starts.
export function timeChart(container, { labels, series, kind = "line", stacked = false, format = String, max, guides = [] }) {
  const present = series.some((s) => s.values.some((v) => v != null && (kind === "line" || v > 0)));
  if (!present) return empty(container, "No data in this window.");
  const totals = labels.map((_, i) =>
    stacked ? series.reduce((sum, s) => sum + (s.values[i] ?? 0), 0) : Math.max(0, ...series.map((s) => s.values[i] ?? 0)),
  );
  const top = max ?? niceMax(Math.max(...totals, ...guides.map((g) => g.value)));
  const { svg, x, y, plotW } = frame(labels, top, format, guides);
  let points = 0;
  if (kind === "bar") {
    const slot = plotW / Math.max(labels.length, 1);
    const width = Math.max(1.5, (slot * 0.8) / (stacked ? 1 : series.length));
    const base = labels.map(() => 0);
    series.forEach((s, index) => {
      s.values.forEach((value, i) => {
        if (!(value > 0)) return;
        const left = x(i) - (slot * 0.8) / 2 + (stacked ? 0 : index * width);
        const bottom = stacked ? base[i] : 0;
        const rect = el("rect", {
          x: left,
          y: y(bottom + value),
          width,
          height: Math.max(1, y(bottom) - y(bottom + value)),
          class: `bar s${index}`,
          "data-series": s.name,
        });
        rect.append(el("title", {}, `${s.name} · ${new Date(labels[i]).toLocaleString()}: ${format(value)}`));
        svg.append(rect);
        if (stacked) base[i] += value;
        points += 1;
      });
    });
  } else {
    series.forEach((s, index) => {
      let d = "";
      s.values.forEach((value, i) => {
        if (value == null) return;
        d += `${i > 0 && s.values[i - 1] != null ? "L" : "M"}${x(i).toFixed(1)},${y(value).toFixed(1)} `;
      });
      svg.append(el("path", { d, class: `line s${index}`, "data-series": s.name }));
      s.values.forEach((value, i) => {
        if (value == null) return;
        const dot = el("circle", { cx: x(i), cy: y(value), r: 2.5, class: `dot s${index}`, "data-series": s.name });
        dot.append(el("title", {}, `${s.name} · ${new Date(labels[i]).toLocaleString()}: ${format(value)}`));
        svg.append(dot);
        points += 1;
      });
    });
  }
  svg.setAttribute("aria-label", series.map((s) => s.name).join(", "));
  container.replaceChildren(svg, legend(series));
  container.dataset.points = String(points);
}

// items: [{label, value}] drawn as horizontal bars (a snapshot's breakdown by source).
export function barList(container, items, format = String) {
  const shown = items.filter((item) => item.value > 0);
  if (!shown.length) return empty(container, "No snapshot stored.");
  const top = Math.max(...shown.map((item) => item.value));
  const rowH = 22;
  const svg = el("svg", { viewBox: `0 0 ${WIDTH} ${shown.length * rowH + 8}`, class: "chart-svg", role: "img" });
  shown.forEach((item, index) => {
    const width = ((WIDTH - 240) * item.value) / top;
    svg.append(el("text", { x: 110, y: index * rowH + 16, class: "axis", "text-anchor": "end" }, item.label));
    const rect = el("rect", { x: 118, y: index * rowH + 4, width: Math.max(1, width), height: rowH - 8, class: "bar s0", "data-series": item.label });
    rect.append(el("title", {}, `${item.label}: ${format(item.value)}`));
    svg.append(rect, el("text", { x: 124 + width, y: index * rowH + 16, class: "axis" }, format(item.value)));
  });
  container.replaceChildren(svg);
  container.dataset.points = String(shown.length);
}
