// Small pure formatting helpers shared by the views: numbers, sizes and dates in the page's
// locale (Intl), the units as the page has always written them.
import { locale, t } from "./i18n.js";

// An Intl formatter is costly to build (its ICU data and patterns), and the transcript formats
// the time of every message it draws: each kind is built once and kept.
const formatters = new Map();

function formatter(kind, make) {
  if (!formatters.has(kind)) formatters.set(kind, make());
  return formatters.get(kind);
}

const decimal = (digits) =>
  formatter(`decimal ${digits}`, () => new Intl.NumberFormat(locale, { minimumFractionDigits: digits, maximumFractionDigits: digits }));

export function formatBytes(bytes) {
  if (bytes < 1024) return t("{value} B", { value: decimal(0).format(bytes) });
  if (bytes < 1024 ** 2) return t("{value} KB", { value: decimal(1).format(bytes / 1024) });
  if (bytes < 1024 ** 3) return t("{value} MB", { value: decimal(1).format(bytes / 1024 ** 2) });
  return t("{value} GB", { value: decimal(1).format(bytes / 1024 ** 3) });
}

// Token counts are short: 950, 4.1k, 312k, 1.25M (CJK locales write 4100 and 31万 instead).
const compact = (digits) =>
  formatter(`compact ${digits}`, () => new Intl.NumberFormat(locale, { notation: "compact", maximumFractionDigits: digits, minimumFractionDigits: digits }));

export function formatTokens(tokens) {
  if (tokens == null) return "—";
  if (tokens < 1000) return decimal(0).format(tokens);
  const digits = tokens < 100_000 ? 1 : tokens < 1_000_000 ? 0 : 2;
  const format = compact(digits);
  // A locale whose short form starts higher (Chinese: 万) writes the whole number until then.
  if (!format.formatToParts(tokens).some((part) => part.type === "compact")) return decimal(0).format(tokens);
  // English writes thousands of tokens with a small k, as the page did before it used Intl.
  return format.format(tokens).replace(/(\d)K$/, "$1k");
}

export function formatDecimal(value, digits) {
  return decimal(digits).format(value);
}

export function formatInt(value) {
  return value == null ? "—" : formatter("int", () => new Intl.NumberFormat(locale)).format(Number(value));
}

// A whole percent ("42%"; some locales put the sign first or apart).
export function formatPercent(value) {
  return formatter("percent", () => new Intl.NumberFormat(locale, { style: "percent", maximumFractionDigits: 0 })).format(value / 100);
}

export function formatTime(iso) {
  if (!iso) return "";
  return formatter("time", () => new Intl.DateTimeFormat(locale, { dateStyle: "medium", timeStyle: "short" })).format(new Date(iso));
}

// A conversation's title from its first message: the first line that has words, without the
// Markdown marks that would show raw in the sidebar (**bold**, *emphasis*, # headings, `code`,
// links, a list or quote marker, a code fence), cut at 60 characters. Underscores stay: they
// are far more often part of a name than emphasis.
export function titleFrom(text) {
  const plain = (line) =>
    line
      .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
      .replace(/^\s{0,3}(?:#{1,6}\s+|>\s*|[-*+]\s+|\d+[.)]\s+)/, "")
      .replace(/(\*\*|\*|~~|`+)(\S(?:.*?\S)?)\1/g, "$2")
      .trim();
  const line = text
    .split("\n")
    .filter((candidate) => !/^\s*(```|~~~)/.test(candidate))
    .map(plain)
    .find(Boolean);
  if (!line) return t("New conversation");
  return line.length > 60 ? `${line.slice(0, 57)}…` : line;
}

// Creates an element with attributes and children; strings become text nodes (never HTML).
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child == null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const ICONS = {
  edit: "M4 20h4L19 9l-4-4L4 16v4zM14 6l4 4",
  trash: "M4 7h16M9 7V4h6v3M6 7l1 13h10l1-13",
  file: "M6 3h8l5 5v13H6zM14 3v5h5",
  branch: "M6 3v18M6 15c0-5 12-2 12-9M18 3v3",
  pin: "M9 3h6l-1 7 4 4H6l4-4zM12 14v7",
  unpin: "M9 3h6l-1 7 4 4H6l4-4zM12 14v7M3 3l18 18",
  archive: "M3 4h18v4H3zM5 8v12h14V8M10 12h4",
  unarchive: "M3 4h18v4H3zM5 8v12h14V8M12 18v-6M9 14l3-3 3 3",
  image: "M4 5h16v14H4zM4 16l5-5 4 4 2-2 5 5M15 9h.01",
  pdf: "M6 3h8l5 5v13H6zM14 3v5h5M9 13h6M9 17h4",
  sheet: "M4 4h16v16H4zM4 10h16M4 15h16M10 4v16",
  code: "M9 8l-4 4 4 4M15 8l4 4-4 4",
  archive_file: "M6 3h12v18H6zM11 3v2h2v2h-2v2h2v2h-2",
};

// The icon of a file by its type (images, PDF, spreadsheets, code and text, archives; others a page).
export function fileIcon(mimeType, filename = "") {
  const type = mimeType ?? "";
  if (type.startsWith("image/")) return icon("image");
  if (type === "application/pdf") return icon("pdf");
  if (/spreadsheet|excel|csv/.test(type) || /\.(xlsx|xls|csv|tsv)$/i.test(filename)) return icon("sheet");
  if (/zip|tar|gzip|x-7z|x-rar/.test(type)) return icon("archive_file");
  if (type.startsWith("text/") || /json|xml|javascript|x-python|x-sh/.test(type)) return icon("code");
  return icon("file");
}

// A stroked 24x24 icon; decorative unless the caller labels its button.
export function icon(name) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "icon");
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("d", ICONS[name]);
  svg.append(path);
  return svg;
}
