// One message of the transcript as the page shows it: a user message (Markdown, Show more, edit
// in place) or an assistant reply, rendered from the stored record (SPEC 2) or built from the
// running turn's stream events; both with their actions and the ‹2/3› version switcher.
import { attachmentChip } from "./attachment-chip.js";
import { errorMessage } from "./errors.js";
import { formatInt, formatTime, h } from "./format.js";
import { t } from "./i18n.js";
import { AS_TYPED, MarkdownStream, renderMarkdown } from "./markdown.js";
import { setApproval, toolElement, updateTool } from "./tool-block.js";

// What a failed reply says, its error in the page's language.
function failedNote(error) {
  return t("The reply failed: {error}", { error: errorMessage(error?.code, error?.message) || error?.code || t("unknown error") });
}

const STATUS_NOTES = {
  cancelled: t("Stopped. What you see is what was written before the stop."),
  interrupted: t("The service restarted while this reply was being written; what you see is what was written before."),
};

const ACTION_LABELS = { edit: t("Edit"), copy: t("Copy"), regenerate: t("Regenerate") };
// A reply that did not complete offers a retry: the same new version, named for what it does.
const RETRIED = new Set(["failed", "cancelled", "interrupted"]);

// ‹2/3›: which version of a message this is, and buttons to the neighbouring ones.
function versionSwitcher(message) {
  const versions = message.versions ?? [];
  if (versions.length < 2) return null;
  const index = versions.indexOf(message.message_id);
  const step = (delta, label, glyph) =>
    h("button", {
      type: "button",
      class: "icon-btn tiny",
      "data-action": "show-version",
      "data-message-id": versions[index + delta] ?? "",
      disabled: versions[index + delta] == null,
      "aria-label": label,
      text: glyph,
    });
  return h(
    "div",
    { class: "versions", role: "group", "aria-label": t("Versions") },
    step(-1, t("Previous version"), "‹"),
    h("span", { class: "versions-position", text: t("{position}/{count}", { position: formatInt(index + 1), count: formatInt(versions.length) }) }),
    step(1, t("Next version"), "›"),
  );
}

// The buttons under a message; the transcript handles their clicks by `data-action`.
function messageActions(message, ...actions) {
  return h(
    "div",
    { class: "msg-actions" },
    versionSwitcher(message),
    ...actions.map((action) => h("button", { type: "button", class: "btn ghost tiny", "data-action": action, text: ACTION_LABELS[action] })),
  );
}

// A user message longer than this (characters or lines) is shown collapsed, behind "Show more".
const COLLAPSE_CHARS = 1200;
const COLLAPSE_LINES = 16;

function isLong(content) {
  return content.length > COLLAPSE_CHARS || content.split("\n").length > COLLAPSE_LINES;
}

export class UserView {
  constructor(message) {
    this.message = message;
    // Its Markdown rendered as a reply's is; Edit and Copy give the text as typed.
    this.body = h("div", { class: "msg-body user-text md" });
    renderMarkdown(this.body, message.content, AS_TYPED);
    this.body.hidden = !message.content; // a message of attachments only
    this.more = null;
    if (isLong(message.content)) {
      this.body.classList.add("is-collapsed");
      this.more = h("button", { type: "button", class: "btn ghost tiny show-more", "aria-expanded": "false", text: t("Show more") });
      this.more.addEventListener("click", () => {
        const collapsed = this.body.classList.toggle("is-collapsed");
        this.more.textContent = collapsed ? t("Show more") : t("Show less");
        this.more.setAttribute("aria-expanded", String(!collapsed));
      });
    }
    this.chips = h("ul", { class: "chips", "aria-label": t("Attachments") }, (message.attachments ?? []).map(attachmentChip));
    this.chips.hidden = !message.attachments?.length;
    this.element = h(
      "article",
      { class: "msg user", dataset: { messageId: message.message_id, role: "user" }, "aria-label": t("You") },
      h("div", { class: "msg-head" }, h("span", { class: "who", text: t("You") }), h("time", { datetime: message.created_at, text: formatTime(message.created_at) })),
      this.body,
      this.more,
      this.chips,
      messageActions(message, "edit", "copy"),
    );
    this.element.view = this;
  }

  copyText() {
    return this.message.content;
  }

  startEditing(onSubmit) {
    const editor = h("textarea", { class: "edit-input", rows: 3, "aria-label": t("Edit your message") });
    editor.value = this.message.content;
    const send = h("button", { type: "submit", class: "btn primary tiny", text: t("Send as a new version") });
    const cancel = h("button", { type: "button", class: "btn ghost tiny", text: t("Cancel") });
    const form = h(
      "form",
      { class: "edit-form" },
      editor,
      h("p", { class: "muted small", text: t("Sends your edited message as a new version of this one; the earlier version stays, one click away (‹ ›).") }),
      this.message.attachments?.length ? h("p", { class: "muted small", text: t("Its attachments go with it.") }) : null,
      h("div", { class: "edit-actions" }, send, cancel),
    );
    const stop = () => {
      form.replaceWith(this.body);
      if (this.more) this.more.hidden = false;
      this.element.classList.remove("editing");
    };
    cancel.addEventListener("click", stop);
    editor.addEventListener("keydown", (event) => {
      if (event.key === "Escape") stop();
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (editor.value.trim()) onSubmit(editor.value);
    });
    this.body.replaceWith(form);
    if (this.more) this.more.hidden = true;
    this.element.classList.add("editing");
    editor.focus();
    editor.setSelectionRange(editor.value.length, editor.value.length);
  }
}

export class AssistantView {
  // modelLabel(id): the name the page shows for a model id (the picker's label).
  constructor(message, modelLabel) {
    this.message = message;
    this.modelLabel = modelLabel;
    this.blocks = h("div", { class: "msg-body" });
    this.note = h("p", { class: "msg-note", hidden: true });
    this.model = h("span", { class: "msg-model muted small" });
    this.element = h(
      "article",
      { class: "msg assistant", dataset: { messageId: message.message_id, role: "assistant" }, "aria-label": t("Assistant") },
      h(
        "div",
        { class: "msg-head" },
        h("span", { class: "who", text: t("Assistant") }),
        h("span", { class: "typing", "aria-hidden": "true" }, h("i"), h("i"), h("i")),
        this.model,
        h("time", { datetime: message.created_at, text: formatTime(message.created_at) }),
      ),
      this.blocks,
      this.note,
      messageActions(message, "copy", "regenerate"),
    );
    this.regenerateButton = this.element.querySelector('[data-action="regenerate"]');
    this.element.view = this;
    this.streamed = ""; // every delta this page received for the running turn, in order
    this.render(message);
  }

  get messageId() {
    return this.message.message_id;
  }

  // The model that wrote the reply, by its label once the page knows the model list.
  showModel() {
    const model = this.message.result?.model;
    this.model.textContent = model ? this.modelLabel(model) : "";
  }

  copyText() {
    return this.message.result?.value ?? this.streamed;
  }

  // A reply being written is a polite live region, busy until it ends: read once, as a whole,
  // not token by token.
  setStatus(status) {
    this.element.dataset.status = status;
    this.regenerateButton.textContent = RETRIED.has(status) ? t("Retry") : ACTION_LABELS.regenerate;
    if (status === "running") this.element.setAttribute("aria-live", "polite");
    this.element.setAttribute("aria-busy", String(status === "running"));
  }

  render(message) {
    this.message = message;
    const result = message.result ?? {};
    this.showModel();
    this.model.hidden = !result.model;
    const children = [];
    for (const block of result.blocks ?? []) {
      if (block.type === "tool") children.push(toolElement(block));
      else if (block.text) {
        const div = h("div", { class: "md" });
        renderMarkdown(div, block.text);
        children.push(div);
      }
    }
    if (!result.blocks?.length && result.value) {
      const div = h("div", { class: "md" });
      renderMarkdown(div, result.value);
      children.push(div);
    }
    this.blocks.replaceChildren(...children);
    this.setStatus(message.status); // after the final text is in: a finished reply is read once
    this.current = null;
    this.tools = new Map([...this.blocks.querySelectorAll("details.tool")].map((el) => [el.dataset.callId, el]));
    const error = result.error;
    let note = STATUS_NOTES[message.status] ?? null;
    if (message.status === "failed") note = failedNote(error);
    this.showNote(note, message.status);
  }

  showNote(text, kind) {
    this.note.hidden = !text;
    this.note.textContent = text ?? "";
    this.note.dataset.kind = kind ?? "";
  }

  // Stream events of the running turn. A replay from the start rebuilds the message.
  startStreaming() {
    this.setStatus("running");
    this.streamed = "";
    this.current = null;
    this.tools = new Map();
    this.blocks.replaceChildren();
    this.showNote(null);
  }

  appendText(text) {
    this.streamed += text;
    if (!this.current) {
      const div = h("div", { class: "md" });
      this.blocks.append(div);
      this.current = new MarkdownStream(div);
    }
    this.current.append(text);
  }

  closeText() {
    this.current?.finish();
    this.current = null;
  }

  toolStarted(data) {
    this.closeText();
    const element = toolElement({ ...data, status: "running" });
    this.tools.set(data.call_id, element);
    this.blocks.append(element);
  }

  toolCompleted(data) {
    let element = this.tools.get(data.call_id);
    if (!element) {
      this.toolStarted(data);
      element = this.tools.get(data.call_id);
    }
    updateTool(element, data);
  }

  approvalRequested(data) {
    const element = this.tools.get(data.call_id);
    if (element) setApproval(element, { ...data, approval: "pending" });
  }

  approvalDecided(data) {
    const element = this.tools.get(data.call_id);
    if (element) setApproval(element, { ...data, approval: data.allowed ? "allowed" : "denied" });
  }

  // The turn ended without a stored message in the event (failed, stopped).
  end(status, error) {
    this.closeText();
    for (const element of this.tools.values()) {
      if (element.dataset.status === "running") updateTool(element, { output: element.outputElement.textContent, is_error: true });
    }
    this.message = { ...this.message, status, result: { ...(this.message.result ?? {}), value: this.streamed, error } };
    this.setStatus(status);
    const note = status === "failed" ? failedNote(error) : STATUS_NOTES[status];
    this.showNote(note, status);
  }
}
