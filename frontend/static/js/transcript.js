// The transcript: user and assistant messages, tool blocks, attachment chips, compaction
// boundaries, and paging to older messages. Messages render from the user-visible record
// (SPEC 2); an assistant message being written is built from stream events, then replaced by
// the stored message when the turn completes.
import { fileIcon, formatBytes, formatInt, formatTime, h } from "./format.js";
import { AS_TYPED, MarkdownStream, renderMarkdown } from "./markdown.js";
import { errorMessage } from "./errors.js";
import { t } from "./i18n.js";

// What a failed reply says, its error in the page's language.
function failedNote(error) {
  return t("The reply failed: {error}", { error: errorMessage(error?.code, error?.message) || error?.code || t("unknown error") });
}

const STATUS_NOTES = {
  cancelled: t("Stopped. What you see is what was written before the stop."),
  interrupted: t("The service restarted while this reply was being written; what you see is what was written before."),
};

const ATTACHMENT_STATES = { deleted: t("deleted"), ready: t("ready"), failed: t("failed"), uploading: t("uploading") };

export function attachmentChip(attachment) {
  const state = attachment.deleted ? "deleted" : attachment.status;
  return h(
    "li",
    { class: `chip chip-${state}`, dataset: { attachmentId: attachment.id } },
    // An image shows itself (a small thumbnail of the stored file); other files their type.
    attachment.mime_type?.startsWith("image/") && !attachment.deleted
      ? h("img", { class: "chip-thumb", src: `/api/attachments/${attachment.id}/download`, alt: "", loading: "lazy" })
      : fileIcon(attachment.mime_type, attachment.filename),
    attachment.deleted
      ? h("span", { class: "chip-name", text: attachment.filename })
      : h("a", { class: "chip-name", href: `/api/attachments/${attachment.id}/download`, text: attachment.filename, download: attachment.filename }),
    h("span", { class: "chip-meta", text: t("{size} · {state}", { size: formatBytes(attachment.size_bytes), state: ATTACHMENT_STATES[state] ?? state }) }),
  );
}

function toolArgsPreview(args) {
  const text = JSON.stringify(args ?? {});
  return text.length > 80 ? `${text.slice(0, 77)}…` : text;
}

const APPROVAL_TEXT = {
  allowed: t("You allowed this call."),
  denied: t("You denied this call; the model was told so."),
};
const APPROVAL_FLAG = { pending: t("waiting for you"), allowed: t("allowed by you"), denied: t("denied by you") };

// An "ask first" call: while it waits, the request with Allow / Deny (app.js sends the
// decision); once decided, what was decided.
function approvalElement(block) {
  const element = h("div", { class: "tool-approval", dataset: { approval: block.approval } });
  if (block.approval === "pending") {
    element.append(
      h("p", { class: "tool-approval-ask", text: t("Run {name} with the arguments below? The reply waits for your decision.", { name: block.name }) }),
      h(
        "div",
        { class: "tool-approval-actions" },
        h("button", { type: "button", class: "btn primary", dataset: { action: "approve", callId: block.call_id }, text: t("Allow") }),
        h("button", { type: "button", class: "btn", dataset: { action: "deny", callId: block.call_id }, text: t("Deny") }),
      ),
    );
  } else {
    element.append(h("p", { class: "tool-approval-done muted small", text: APPROVAL_TEXT[block.approval] }));
  }
  return element;
}

function setApproval(element, block) {
  element.dataset.approval = block.approval;
  const shown = approvalElement(block);
  if (element.approvalElement) element.approvalElement.replaceWith(shown);
  else element.querySelector(".tool-body").prepend(shown);
  element.approvalElement = shown;
  let flag = element.querySelector(".tool-approval-flag");
  if (!flag) {
    flag = h("span", { class: "tool-approval-flag" });
    element.querySelector(".tool-status").before(flag);
  }
  flag.textContent = APPROVAL_FLAG[block.approval];
  // A waiting request is shown open, so its buttons are in view.
  if (block.approval === "pending") element.open = true;
}

function toolElement(block) {
  const status = block.status ?? "running";
  const output = h("pre", { class: "tool-output" });
  output.textContent = block.output ?? "";
  const element = h(
    "details",
    { class: "tool", dataset: { callId: block.call_id, status } },
    h(
      "summary",
      {},
      h("span", { class: "tool-label", text: t("Tool") }),
      h("span", { class: "tool-name", text: block.name }),
      h("code", { class: "tool-args-preview", text: toolArgsPreview(block.args) }),
      h("span", { class: "tool-status", text: status }),
      block.truncated_for_model ? h("span", { class: "tool-flag", title: t("The model saw a shortened copy of this output"), text: t("shortened for the model") }) : null,
    ),
    h(
      "div",
      { class: "tool-body" },
      h("p", { class: "tool-heading", text: t("Arguments") }),
      h("pre", { class: "tool-args", text: JSON.stringify(block.args ?? {}, null, 2) }),
      h("p", { class: "tool-heading", text: t("Output") }),
      output,
    ),
  );
  element.outputElement = output;
  if (block.approval) setApproval(element, block);
  return element;
}

function updateTool(element, data) {
  const status = data.is_error ? "error" : "completed";
  element.dataset.status = status;
  element.querySelector(".tool-status").textContent = status;
  element.outputElement.textContent = data.output ?? "";
  if (data.truncated_for_model && !element.querySelector(".tool-flag")) {
    element.querySelector("summary").append(h("span", { class: "tool-flag", title: t("The model saw a shortened copy of this output"), text: t("shortened for the model") }));
  }
}

export function boundaryElement(record, assistantMessageId) {
  const strategy = record.strategy ?? "summary_compact";
  const summarized = strategy === "summary_compact" || strategy === "summary_ahead";
  const figures = record.before_tokens != null && record.after_tokens != null ? t(" ({before_tokens} → {after_tokens} tokens)", { before_tokens: formatInt(record.before_tokens), after_tokens: formatInt(record.after_tokens) }) : "";
  // A summary made ahead of time (between turns) is labelled as such.
  const label =
    strategy === "summary_ahead"
      ? t("Earlier messages summarized ahead of time")
      : summarized
        ? t("Earlier messages summarized")
        : t("Earlier messages trimmed from the model's context");
  const body = h("div", { class: "boundary-body" });
  if (record.summary_text) {
    body.append(h("p", { class: "muted small", text: t("What the model now sees instead of the messages above this line (they stay here for you); the messages below it reach the model verbatim:") }));
    body.append(h("div", { class: "summary-text", text: record.summary_text }));
  } else {
    body.append(h("p", { class: "muted small", text: t("The messages above stay here for you; the model sees a shorter context from this point on.") }));
  }
  return h(
    "section",
    { class: "boundary", "aria-label": label, dataset: { forMessage: assistantMessageId } },
    h("details", {}, h("summary", {}, h("span", { class: "boundary-label", text: label }), h("span", { class: "boundary-figures", text: figures })), body),
  );
}

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

class UserView {
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

class AssistantView {
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

export class Transcript {
  constructor({ scroller, list, topSentinel, olderStatus, emptyState, modelLabel }) {
    this.modelLabel = modelLabel;
    this.scroller = scroller;
    this.list = list;
    this.olderStatus = olderStatus;
    this.emptyState = emptyState;
    this.views = new Map();
    this.generation = 0;
    this.hasMore = false;
    this.loadingOlder = false;
    this.loadOlder = null; // set by the app: async (beforeMessageId) => {items, has_more}
    this.observer = new IntersectionObserver((entries) => {
      if (entries.some((entry) => entry.isIntersecting)) this.#older();
    }, { root: scroller, rootMargin: "400px 0px 0px 0px" });
    this.observer.observe(topSentinel);
    // Whether the view follows new content: true while the reader is at the end.
    this.stick = true;
    this.scrollQueued = false;
    scroller.addEventListener("scroll", () => {
      this.stick = this.atEnd();
    }, { passive: true });
  }

  reset() {
    this.generation += 1; // pages still loading for the old view are dropped
    this.views.clear();
    this.list.replaceChildren();
    this.hasMore = false;
    this.olderStatus.hidden = true;
    this.emptyState.hidden = false;
  }

  get oldestMessageId() {
    const first = this.list.querySelector(".msg");
    return first ? Number(first.dataset.messageId) : null;
  }

  get lastAssistant() {
    const all = this.list.querySelectorAll(".msg.assistant");
    return all.length ? all[all.length - 1].view : null;
  }

  view(messageId) {
    return this.views.get(messageId) ?? null;
  }

  // The model list arrived after replies were shown with the bare ids: name them by label.
  relabelModels() {
    for (const view of this.views.values()) {
      if (view instanceof AssistantView) view.showModel();
    }
  }

  #build(messages) {
    const fragment = document.createDocumentFragment();
    const made = [];
    for (const message of messages) {
      const view = message.role === "user" ? new UserView(message) : new AssistantView(message, this.modelLabel);
      this.views.set(message.message_id, view);
      fragment.append(view.element);
      made.push(view);
    }
    for (const view of made) {
      if (view instanceof AssistantView) this.#boundaries(view, view.message.result?.context_compactions, fragment);
    }
    return fragment;
  }

  // Shows the newest page and scrolls to the end.
  showPage(messages, hasMore) {
    this.reset();
    this.hasMore = hasMore;
    this.list.append(this.#build(messages));
    this.emptyState.hidden = messages.length > 0;
    this.scrollToEnd();
    requestAnimationFrame(() => this.#fillUp());
  }

  prepend(messages, hasMore) {
    const fromBottom = this.scroller.scrollHeight - this.scroller.scrollTop;
    this.list.prepend(this.#build(messages));
    this.hasMore = hasMore;
    this.scroller.scrollTop = this.scroller.scrollHeight - fromBottom;
  }

  append(message) {
    this.list.append(this.#build([message]));
    this.emptyState.hidden = true;
    if (this.stick || message.role === "user") this.scrollToEnd();
    return this.views.get(message.message_id);
  }

  // The boundary goes above the first message the model still sees verbatim (the record's
  // `first_kept_message_id`; without one, the user message of the turn that compacted). The
  // messages above it stay shown in full, marked as summarized. A record is drawn once: a turn's
  // stream also carries the compaction made ahead of time that its history opens with, which
  // the reply before it stores (and a reload draws from there).
  addBoundary(view, record, parent = this.list) {
    if (record.status !== "completed") return;
    const key = `${record.strategy ?? "summary_compact"} ${record.created_at}`;
    const drawn = `.boundary[data-record="${CSS.escape(key)}"]`;
    if (parent.querySelector(drawn) || this.list.querySelector(drawn)) return;
    const element = boundaryElement(record, view.messageId);
    element.dataset.record = key;
    const firstKept = record.first_kept_message_id ?? view.messageId - 1;
    const anchor = this.views.get(firstKept);
    const before = anchor && anchor.element.parentNode === parent ? anchor.element : view.element;
    parent.insertBefore(element, before.parentNode === parent ? before : null);
    if (record.first_kept_message_id == null) return;
    for (const [messageId, other] of this.views) {
      if (messageId < firstKept && other.element.parentNode === parent) other.element.classList.add("is-summarized");
    }
  }

  #boundaries(view, records, parent) {
    for (const record of records ?? []) this.addBoundary(view, record, parent);
  }

  atEnd() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  }

  scrollToEnd() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
    this.stick = true;
  }

  // After new streamed content: once per frame, stay at the end if the reader was there.
  followEnd() {
    if (!this.stick || this.scrollQueued) return;
    this.scrollQueued = true;
    requestAnimationFrame(() => {
      this.scrollQueued = false;
      if (this.stick) this.scrollToEnd();
    });
  }

  // Loads older pages until `messageId` is shown, then scrolls it into view and marks it.
  async reveal(messageId) {
    const generation = this.generation;
    while (!this.views.has(messageId) && this.hasMore && this.loadOlder) {
      if (this.loadingOlder) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        continue;
      }
      this.loadingOlder = true;
      try {
        const page = await this.loadOlder(this.oldestMessageId);
        if (generation !== this.generation) return false;
        this.prepend(page.items, page.has_more);
      } finally {
        this.loadingOlder = false;
      }
    }
    const view = this.views.get(messageId);
    if (!view || generation !== this.generation) return false;
    this.stick = false;
    for (const found of this.list.querySelectorAll(".msg.is-found")) found.classList.remove("is-found");
    view.element.classList.add("is-found");
    view.element.scrollIntoView({ block: "center" });
    return true;
  }

  async #older() {
    if (!this.hasMore || this.loadingOlder || !this.loadOlder) return;
    const before = this.oldestMessageId;
    if (before == null) return;
    const generation = this.generation;
    this.loadingOlder = true;
    this.olderStatus.hidden = false;
    this.olderStatus.textContent = t("Loading earlier messages…");
    try {
      const page = await this.loadOlder(before);
      if (generation !== this.generation) return;
      this.prepend(page.items, page.has_more);
      this.olderStatus.hidden = true;
    } catch (error) {
      if (generation === this.generation) this.olderStatus.textContent = t("Earlier messages could not be loaded: {message}", { message: error.message });
    } finally {
      this.loadingOlder = false;
    }
    requestAnimationFrame(() => this.#fillUp());
  }

  // While the loaded messages do not reach past the top of the view, fetch more.
  #fillUp() {
    if (this.hasMore && this.scroller.scrollTop < 400) this.#older();
  }
}
