// "What the model sees": the last model request of the conversation's latest turn, exactly as
// it was sent (after every guard stage), entry by entry with its source and token count
// (`GET /api/conversations/{id}/model-request`), and the request the next turn would send
// before the user's message (`GET .../next-model-request`). The transcript is the user's view; this is the
// other one (system prompt, the chat's instructions, tool definitions built-in and MCP, summary,
// kept tail, previews, shortened outputs).
import { api } from "./api.js";
import { formatInt, h } from "./format.js";

const SOURCES = {
  system: "System prompt",
  instructions: "This chat's instructions",
  guidance: "Guidance for this attempt",
  tool_schemas: "Tool definition",
  history: "History",
  tool_output: "Tool output",
  attachment_preview: "Attachment preview",
  summary: "Summary of earlier turns",
  kept_tail: "Kept verbatim",
  current_input: "Your message",
};
const ROLES = { system: "system", user: "user", assistant: "assistant", tool: "tool", tool_schema: "tool" };

function entryLabel(entry) {
  const source = SOURCES[entry.source] ?? entry.source;
  const server = entry.server ? ` (MCP server ${entry.server})` : "";
  const name = entry.name ? `: ${entry.name}${server}` : "";
  return `${source}${name} · ${ROLES[entry.role] ?? entry.role}`;
}

function entryBody(entry) {
  if (entry.text_hidden) return `(The operator's system prompt: ${formatInt(entry.tokens)} tokens. Its text is shown to operators only.)`;
  return entry.text || "(empty)";
}

function renderEntry(entry) {
  const notes = [h("span", { class: "model-entry-tokens", text: `${formatInt(entry.tokens)} tokens` })];
  if (entry.preview_tokens) notes.push(h("span", { class: "muted", text: ` (preview ${formatInt(entry.preview_tokens)})` }));
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
  sent: { label: "Last request", path: "model-request", lead: "The last request sent to the model, exactly as sent. Your transcript keeps every original message." },
  next: { label: "Next request", path: "next-model-request", lead: "What the next turn would send before your message: the same guard stages, no model called." },
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
    const close = h("button", { type: "button", class: "btn ghost", text: "Close" });
    this.dialog = h(
      "dialog",
      { class: "model-view", "aria-labelledby": "model-view-title" },
      h("div", { class: "model-view-head" }, h("h2", { id: "model-view-title", text: "What the model sees" }), close),
      h("div", { class: "model-view-tabs", role: "group", "aria-label": "Which request" }, ...this.tabs),
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
    this.body.replaceChildren(h("p", { class: "muted", text: "Loading…" }));
    let data;
    try {
      data = await api.get(`/api/conversations/${this.conversationId}/${view.path}`);
    } catch (error) {
      if (this.shown !== name) return;
      this.body.replaceChildren(h("p", { class: "model-view-error", role: "alert", text: `The model's request could not be loaded: ${error.message}` }));
      return;
    }
    if (this.shown !== name) return;
    this.render(data);
  }

  render(data) {
    if (data.state === "no_turns") {
      this.body.replaceChildren(h("p", { class: "muted model-view-note", text: "Nothing has been sent to the model in this conversation yet." }));
      return;
    }
    if (data.state === "no_model_call" || data.state === "unavailable") {
      this.body.replaceChildren(h("p", { class: "model-view-note", role: "status", text: data.note }));
      return;
    }
    let where;
    if (data.state === "next") where = " (before your next message)";
    else where = data.calls > 1 ? ` (call ${data.calls} of ${data.calls} in the latest turn)` : " (the latest turn)";
    const total = h("p", { class: "small model-view-total", "data-total": String(data.total_tokens) },
      `${formatInt(data.total_tokens)} tokens in this request${where}, ${formatInt(data.framing_tokens)} of them framing.`);
    const parts = [total];
    if (data.summary_due) parts.push(h("p", { class: "model-view-note", role: "status", text: "This history reaches the summary trigger: the next turn summarizes the older messages before it calls the model, so it will send less than this." }));
    this.body.replaceChildren(...parts, h("ol", { class: "model-entries" }, data.entries.map(renderEntry)));
  }
}
