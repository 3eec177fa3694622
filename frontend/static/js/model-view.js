// "What the model sees": the model-visible context of a conversation (SPEC 2, 6.1
// `GET /api/conversations/{id}/context`), shown in a dialog next to the meter. The transcript
// is the user's view; this is the other one (summary, kept messages, shortened tool outputs).
// A server without the endpoint says so instead of showing a broken view.
import { api } from "./api.js";
import { formatInt, h } from "./format.js";

function entryText(content) {
  if (typeof content === "string") return content;
  return (content ?? []).map((part) => part.text ?? JSON.stringify(part)).join("\n");
}

function entryLabel(entry) {
  const marks = entry.metadata ?? {};
  if (marks.summary_compacted) return "Summary of earlier turns";
  const role = { system: "System", user: "User", assistant: "Assistant", tool: `Tool result${entry.name ? `: ${entry.name}` : ""}` }[entry.role] ?? entry.role;
  const notes = [];
  if (marks.checkpoint_retained) notes.push("kept verbatim");
  if (marks.compacted) notes.push("shortened for the model");
  return notes.length ? `${role} (${notes.join(", ")})` : role;
}

function renderEntry(entry) {
  const calls = (entry.tool_calls ?? []).map((call) => `→ ${call.name}(${JSON.stringify(call.args ?? {})})`);
  const body = [entryText(entry.content), ...calls].filter(Boolean).join("\n");
  return h(
    "li",
    { class: `model-entry role-${entry.role}${entry.metadata?.summary_compacted ? " is-summary" : ""}` },
    h("p", { class: "model-entry-role", text: entryLabel(entry) }),
    h("pre", { class: "model-entry-body", text: body || "(empty)" }),
  );
}

export class ModelView {
  constructor(conversationId) {
    this.conversationId = conversationId;
    this.body = h("div", { class: "model-view-body", "aria-live": "polite" });
    const close = h("button", { type: "button", class: "btn ghost", text: "Close" });
    this.dialog = h(
      "dialog",
      { class: "model-view", "aria-labelledby": "model-view-title" },
      h("div", { class: "model-view-head" }, h("h2", { id: "model-view-title", text: "What the model sees" }), close),
      h("p", { class: "muted small", text: "The next reply is written from this context. Your transcript keeps every original message." }),
      this.body,
    );
    close.addEventListener("click", () => this.dialog.close());
    this.dialog.addEventListener("close", () => this.dialog.remove());
    document.body.append(this.dialog);
  }

  async show() {
    this.dialog.showModal();
    this.body.replaceChildren(h("p", { class: "muted", text: "Loading…" }));
    let data;
    try {
      data = await api.get(`/api/conversations/${this.conversationId}/context`);
    } catch (error) {
      const missing = error.status === 404 || error.status === 405;
      this.body.replaceChildren(h("p", { class: "muted", text: missing ? "This server does not offer the model's view of a conversation yet." : `The model's view could not be loaded: ${error.message}` }));
      return;
    }
    const entries = data?.messages ?? data?.history ?? data?.context ?? [];
    const metrics = data?.context_metrics ?? data?.metrics ?? null;
    const parts = [];
    if (metrics) parts.push(h("p", { class: "small", text: `${formatInt(metrics.used_input)} of ${formatInt(metrics.context_window)} tokens in the window.` }));
    parts.push(entries.length ? h("ol", { class: "model-entries" }, entries.map(renderEntry)) : h("p", { class: "muted", text: "Nothing yet: the model has not been called in this conversation." }));
    this.body.replaceChildren(...parts);
  }
}
