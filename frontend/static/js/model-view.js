// "What the model sees": the last model request of the conversation's latest turn, exactly as
// it was sent (after every guard stage), entry by entry with its source and token count
// (`GET /api/conversations/{id}/model-request`), and the request the next turn would send
// before the user's message (`GET .../next-model-request`). The transcript is the user's view; this is the
// other one (system prompt, the chat's instructions, tool definitions built-in and MCP, summary,
// kept tail, previews, shortened outputs).
import { api } from "./api.js";
import { formatInt, h } from "./format.js";
import { t } from "./i18n.js";

const SOURCES = {
  system: t("System prompt"),
  instructions: t("This chat's instructions"),
  guidance: t("Guidance for this attempt"),
  tool_schemas: t("Tool definition"),
  history: t("History"),
  tool_output: t("Tool output"),
  attachment_preview: t("Attachment preview"),
  summary: t("Summary of earlier turns"),
  kept_tail: t("Kept verbatim"),
  current_input: t("Your message"),
};
const ROLES = { system: t("system"), user: t("user"), assistant: t("assistant"), tool: t("tool"), tool_schema: t("tool") };

function entryLabel(entry) {
  const source = SOURCES[entry.source] ?? entry.source;
  const role = ROLES[entry.role] ?? entry.role;
  if (entry.name && entry.server) return t("{source}: {name} (MCP server {server}) · {role}", { source, name: entry.name, server: entry.server, role });
  if (entry.name) return t("{source}: {name} · {role}", { source, name: entry.name, role });
  return t("{source} · {role}", { source, role });
}

function entryBody(entry) {
  if (entry.text_hidden) return t("(The operator's system prompt: {tokens} tokens. Its text is shown to operators only.)", { tokens: formatInt(entry.tokens) });
  return entry.text || t("(empty)");
}

function renderEntry(entry) {
  const notes = [h("span", { class: "model-entry-tokens", text: t("{tokens} tokens", { tokens: formatInt(entry.tokens) }) })];
  if (entry.preview_tokens) notes.push(h("span", { class: "muted", text: t(" (preview {tokens})", { tokens: formatInt(entry.preview_tokens) }) }));
  return h(
    "li",
    {
      class: `model-entry role-${entry.role}${entry.source === "summary" ? " is-summary" : ""}`,
      "data-source": entry.source,
      "data-tokens": String(entry.tokens),
    },
    h("p", { class: "model-entry-role" }, h("span", { text: entryLabel(entry) }), " ", ...notes),
    h("pre", { class: "model-entry-body", text: entryBody(entry) }),
  );
}

// The two requests the dialog shows: the last one sent, and the one the next turn would send.
const VIEWS = {
  sent: { label: t("Last request"), path: "model-request", lead: t("The last request sent to the model, exactly as sent. Your transcript keeps every original message.") },
  next: { label: t("Next request"), path: "next-model-request", lead: t("What the next turn would send before your message: the same guard stages, no model called.") },
};

export class ModelView {
  constructor(conversationId) {
    this.conversationId = conversationId;
    this.body = h("div", { class: "model-view-body", "aria-live": "polite" });
    this.lead = h("p", { class: "muted small" });
    this.tabs = Object.entries(VIEWS).map(([name, view]) => {
      const tab = h("button", { type: "button", class: "btn ghost model-view-tab", "aria-pressed": "false", dataset: { view: name }, text: view.label });
      tab.addEventListener("click", () => this.load(name));
      return tab;
    });
    const close = h("button", { type: "button", class: "btn ghost", text: t("Close") });
    this.dialog = h(
      "dialog",
      { class: "model-view", "aria-labelledby": "model-view-title" },
      h("div", { class: "model-view-head" }, h("h2", { id: "model-view-title", text: t("What the model sees") }), close),
      h("div", { class: "model-view-tabs", role: "group", "aria-label": t("Which request") }, ...this.tabs),
      this.lead,
      this.body,
    );
    close.addEventListener("click", () => this.dialog.close());
    this.dialog.addEventListener("close", () => this.dialog.remove());
    document.body.append(this.dialog);
  }

  async show() {
    this.dialog.showModal();
    await this.load("sent");
  }

  async load(name) {
    const view = VIEWS[name];
    this.shown = name;
    for (const tab of this.tabs) tab.setAttribute("aria-pressed", String(tab.dataset.view === name));
    this.lead.textContent = view.lead;
    this.body.replaceChildren(h("p", { class: "muted", text: t("Loading…") }));
    let data;
    try {
      data = await api.get(`/api/conversations/${this.conversationId}/${view.path}`);
    } catch (error) {
      if (this.shown !== name) return;
      this.body.replaceChildren(h("p", { class: "model-view-error", role: "alert", text: t("The model's request could not be loaded: {message}", { message: error.message }) }));
      return;
    }
    if (this.shown !== name) return;
    this.render(data);
  }

  render(data) {
    if (data.state === "no_turns") {
      this.body.replaceChildren(h("p", { class: "muted model-view-note", text: t("Nothing has been sent to the model in this conversation yet.") }));
      return;
    }
    if (data.state === "no_model_call" || data.state === "unavailable") {
      this.body.replaceChildren(h("p", { class: "model-view-note", role: "status", text: data.note }));
      return;
    }
    const figures = { tokens: formatInt(data.total_tokens), calls: formatInt(data.calls), framing: formatInt(data.framing_tokens) };
    let said;
    if (data.state === "next") said = t("{tokens} tokens in this request (before your next message), {framing} of them framing.", figures);
    else if (data.calls > 1) said = t("{tokens} tokens in this request (call {calls} of {calls} in the latest turn), {framing} of them framing.", figures);
    else said = t("{tokens} tokens in this request (the latest turn), {framing} of them framing.", figures);
    const total = h("p", { class: "small model-view-total", "data-total": String(data.total_tokens) }, said);
    const parts = [total];
    if (data.summary_due) parts.push(h("p", { class: "model-view-note", role: "status", text: t("This history reaches the summary trigger: the next turn summarizes the older messages before it calls the model, so it will send less than this.") }));
    this.body.replaceChildren(...parts, h("ol", { class: "model-entries" }, data.entries.map(renderEntry)));
  }
}
