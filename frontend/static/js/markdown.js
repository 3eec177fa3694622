// Markdown rendering: marked for the syntax, DOMPurify for safety, highlight.js for code, KaTeX
// for math ($...$ inline, $$...$$ as a block) as MathML, which the browser lays out itself: no
// fonts to load and no inline styles (the CSP allows none).
// Streaming text renders incrementally: finished paragraphs are frozen once, and only the
// unfinished tail is re-rendered per delta, so a long reply costs the same per token.
import { Marked } from "../vendor/marked.esm.js";
import DOMPurify from "../vendor/purify.es.mjs";
import hljs from "../vendor/highlight.min.js";
import markedKatex from "../vendor/marked-katex.esm.js";
import { h } from "./format.js";
import { t } from "./i18n.js";

const marked = new Marked({ gfm: true, breaks: false });
// Invalid TeX is shown as its source, not an error; "$5 and $10" is no math (the extension
// wants no space inside the dollars and one after the closing one).
marked.use(markedKatex({ output: "mathml", throwOnError: false }));
// A user's message renders AS_TYPED: the same Markdown and sanitizer as a reply, but its line
// breaks stay, and what looks like HTML in it is the user's text (shown as typed), not markup.
marked.use({
  renderer: {
    html(token) {
      if (!this.options.typed) return false;
      const text = this.text({ text: token.text });
      return token.block ? `<p>${text}</p>` : text;
    },
  },
});
export const AS_TYPED = { breaks: true, typed: true };
// Auto-detecting the language of long code is slow; such blocks stay plain.
const AUTO_HIGHLIGHT_LIMIT = 4000;

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

export function markdownToHtml(text, options = {}) {
  return DOMPurify.sanitize(marked.parse(text, options), { USE_PROFILES: { html: true, mathMl: true } });
}

function decorateCode(container, highlight) {
  for (const code of container.querySelectorAll("pre > code")) {
    const pre = code.parentElement;
    if (pre.parentElement?.classList.contains("codeblock")) continue;
    const language = [...code.classList].find((c) => c.startsWith("language-"))?.slice(9) ?? "";
    if (highlight && (language ? hljs.getLanguage(language) : code.textContent.length < AUTO_HIGHLIGHT_LIMIT)) {
      hljs.highlightElement(code);
    }
    const head = h(
      "div",
      { class: "codeblock-head" },
      h("span", { class: "codeblock-lang", text: language || "code" }),
      h("button", { type: "button", class: "btn ghost tiny", "data-action": "copy-code", text: t("Copy") }),
    );
    const wrapper = h("div", { class: "codeblock" });
    pre.replaceWith(wrapper);
    wrapper.append(head, pre);
  }
}

// Renders complete Markdown into `element` (replacing its content), code highlighted;
// `options` are marked's (a user's message: AS_TYPED).
export function renderMarkdown(element, text, options = {}) {
  element.innerHTML = markdownToHtml(text, options);
  decorateCode(element, true);
}

const FENCE = /^ {0,3}(`{3,}|~{3,})/;

export class MarkdownStream {
  constructor(element) {
    this.element = element;
    this.text = "";
    this.frozenLength = 0; // text[0:frozenLength] is rendered into frozen chunks
    this.scanned = 0; // complete lines up to here were checked for paragraph breaks
    this.inFence = false;
    this.frozen = h("div", { class: "md-frozen" });
    this.live = h("div", { class: "md-live" });
    element.replaceChildren(this.frozen, this.live);
  }

  append(chunk) {
    this.text += chunk;
    const breakAt = this.#lastBreak();
    if (breakAt > this.frozenLength) {
      const part = h("div", { class: "md-chunk" });
      renderMarkdown(part, this.text.slice(this.frozenLength, breakAt));
      this.frozen.append(part);
      this.frozenLength = breakAt;
    }
    this.live.innerHTML = markdownToHtml(this.text.slice(this.frozenLength));
  }

  // The end of the last blank line outside a code fence among the complete lines seen so far.
  #lastBreak() {
    let found = this.frozenLength;
    let start = this.scanned;
    for (;;) {
      const end = this.text.indexOf("\n", start);
      if (end < 0) break;
      const line = this.text.slice(start, end);
      if (FENCE.test(line)) this.inFence = !this.inFence;
      else if (!this.inFence && line.trim() === "" && start > this.frozenLength) found = end + 1;
      start = end + 1;
    }
    this.scanned = start;
    return found;
  }

  // The whole text rendered in one piece (lists and code blocks exactly as the final view).
  finish() {
    renderMarkdown(this.element, this.text);
  }
}

// Clipboard with a fallback for pages served over plain HTTP on a LAN address.
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = h("textarea", { class: "visually-hidden", readonly: true });
  area.value = text;
  document.body.append(area);
  area.select();
  document.execCommand("copy");
  area.remove();
}
