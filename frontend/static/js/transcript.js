// The transcript: user and assistant messages, tool blocks, attachment chips, compaction
// boundaries, and paging to older messages. Messages render from the user-visible record
// (SPEC 2); an assistant message being written is built from stream events, then replaced by
// the stored message when the turn completes.
import { formatBytes, formatInt, formatTime, h, icon } from "./format.js";
import { MarkdownStream, renderMarkdown } from "./markdown.js";

const STATUS_NOTES = {
  cancelled: "Stopped. What you see is what was written before the stop.",
  interrupted: "The service restarted while this reply was being written; what you see is what was written before.",
};

export function attachmentChip(attachment) {
  const state = attachment.deleted ? "deleted" : attachment.status;
  return h(
    "li",
    { class: `chip chip-${state}`, dataset: { attachmentId: attachment.id } },
    icon("file"),
    attachment.deleted
      ? h("span", { class: "chip-name", text: attachment.filename })
      : h("a", { class: "chip-name", href: `/api/attachments/${attachment.id}/download`, text: attachment.filename, download: attachment.filename }),
    h("span", { class: "chip-meta", text: `${formatBytes(attachment.size_bytes)} · ${state}` }),
  );
}

function toolArgsPreview(args) {
  const text = JSON.stringify(args ?? {});
  return text.length > 80 ? `${text.slice(0, 77)}…` : text;
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
      h("span", { class: "tool-label", text: "Tool" }),
      h("span", { class: "tool-name", text: block.name }),
      h("code", { class: "tool-args-preview", text: toolArgsPreview(block.args) }),
      h("span", { class: "tool-status", text: status }),
      block.truncated_for_model ? h("span", { class: "tool-flag", title: "The model saw a shortened copy of this output", text: "shortened for the model" }) : null,
    ),
    h(
      "div",
      { class: "tool-body" },
      h("p", { class: "tool-heading", text: "Arguments" }),
      h("pre", { class: "tool-args", text: JSON.stringify(block.args ?? {}, null, 2) }),
      h("p", { class: "tool-heading", text: "Output" }),
      output,
    ),
  );
  element.outputElement = output;
  return element;
}

function updateTool(element, data) {
  const status = data.is_error ? "error" : "completed";
  element.dataset.status = status;
  element.querySelector(".tool-status").textContent = status;
  element.outputElement.textContent = data.output ?? "";
  if (data.truncated_for_model && !element.querySelector(".tool-flag")) {
    element.querySelector("summary").append(h("span", { class: "tool-flag", title: "The model saw a shortened copy of this output", text: "shortened for the model" }));
  }
}

export function boundaryElement(record, assistantMessageId) {
  const summarized = (record.strategy ?? "summary_compact") === "summary_compact";
  const figures = record.before_tokens != null && record.after_tokens != null ? ` (${formatInt(record.before_tokens)} → ${formatInt(record.after_tokens)} tokens)` : "";
  const label = summarized ? "Earlier messages summarized" : "Earlier messages trimmed from the model's context";
  const body = h("div", { class: "boundary-body" });
  if (record.summary_text) {
    body.append(h("p", { class: "muted small", text: "What the model now sees instead of the messages above (they stay here for you):" }));
    body.append(h("div", { class: "summary-text", text: record.summary_text }));
  } else {
    body.append(h("p", { class: "muted small", text: "The messages above stay here for you; the model sees a shorter context from this point on." }));
  }
  return h(
    "section",
    { class: "boundary", "aria-label": label, dataset: { forMessage: assistantMessageId } },
    h("details", {}, h("summary", {}, h("span", { class: "boundary-label", text: label }), h("span", { class: "boundary-figures", text: figures })), body),
  );
}

class UserView {
  constructor(message) {
    this.message = message;
    this.body = h("div", { class: "msg-body user-text" });
    this.body.textContent = message.content;
    this.body.hidden = !message.content; // a message of attachments only
    this.chips = h("ul", { class: "chips", "aria-label": "Attachments" }, (message.attachments ?? []).map(attachmentChip));
    this.chips.hidden = !message.attachments?.length;
    this.element = h(
      "article",
      { class: "msg user", dataset: { messageId: message.message_id, role: "user" }, "aria-label": "You" },
      h("div", { class: "msg-head" }, h("span", { class: "who", text: "You" }), h("time", { datetime: message.created_at, text: formatTime(message.created_at) })),
      this.body,
      this.chips,
      h(
        "div",
        { class: "msg-actions" },
        h("button", { type: "button", class: "btn ghost tiny", "data-action": "edit", text: "Edit" }),
        h("button", { type: "button", class: "btn ghost tiny", "data-action": "copy", text: "Copy" }),
      ),
    );
    this.element.view = this;
  }

  copyText() {
    return this.message.content;
  }

  startEditing(onSubmit) {
    const editor = h("textarea", { class: "edit-input", rows: 3, "aria-label": "Edit your message" });
    editor.value = this.message.content;
    const send = h("button", { type: "submit", class: "btn primary tiny", text: "Send as a new branch" });
    const cancel = h("button", { type: "button", class: "btn ghost tiny", text: "Cancel" });
    const form = h(
      "form",
      { class: "edit-form" },
      editor,
      h("p", { class: "muted small", text: "Sends your edited message in a copy of this conversation up to here; this conversation stays as it is." }),
      this.message.attachments?.length ? h("p", { class: "muted small", text: "Its attachments are not sent again; attach them anew if the reply needs them." }) : null,
      h("div", { class: "edit-actions" }, send, cancel),
    );
    const stop = () => {
      form.replaceWith(this.body);
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
    this.element.classList.add("editing");
    editor.focus();
    editor.setSelectionRange(editor.value.length, editor.value.length);
  }
}

class AssistantView {
  constructor(message) {
    this.message = message;
    this.blocks = h("div", { class: "msg-body" });
    this.note = h("p", { class: "msg-note", hidden: true });
    this.element = h(
      "article",
      { class: "msg assistant", dataset: { messageId: message.message_id, role: "assistant" }, "aria-label": "Assistant" },
      h("div", { class: "msg-head" }, h("span", { class: "who", text: "Assistant" }), h("span", { class: "typing", "aria-hidden": "true" }, h("i"), h("i"), h("i"))),
      this.blocks,
      this.note,
      h(
        "div",
        { class: "msg-actions" },
        h("button", { type: "button", class: "btn ghost tiny", "data-action": "copy", text: "Copy" }),
        h("button", { type: "button", class: "btn ghost tiny", "data-action": "regenerate", text: "Regenerate" }),
      ),
    );
    this.element.view = this;
    this.streamed = ""; // every delta this page received for the running turn, in order
    this.render(message);
  }

  get messageId() {
    return this.message.message_id;
  }

  copyText() {
    return this.message.result?.value ?? this.streamed;
  }

  setStatus(status) {
    this.element.dataset.status = status;
    this.element.setAttribute("aria-busy", String(status === "running"));
  }

  render(message) {
    this.message = message;
    this.setStatus(message.status);
    const result = message.result ?? {};
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
    this.current = null;
    this.tools = new Map([...this.blocks.querySelectorAll("details.tool")].map((el) => [el.dataset.callId, el]));
    const error = result.error;
    let note = STATUS_NOTES[message.status] ?? null;
    if (message.status === "failed") note = `The reply failed: ${error?.message || error?.code || "unknown error"}`;
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

  // The turn ended without a stored message in the event (failed, stopped).
  end(status, error) {
    this.closeText();
    for (const element of this.tools.values()) {
      if (element.dataset.status === "running") updateTool(element, { output: element.outputElement.textContent, is_error: true });
    }
    this.message = { ...this.message, status, result: { ...(this.message.result ?? {}), value: this.streamed, error } };
    this.setStatus(status);
    const note = status === "failed" ? `The reply failed: ${error?.message || error?.code || "unknown error"}` : STATUS_NOTES[status];
    this.showNote(note, status);
  }
}

export class Transcript {
  constructor({ scroller, list, topSentinel, olderStatus, emptyState }) {
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

  #build(messages) {
    const fragment = document.createDocumentFragment();
    const made = [];
    for (const message of messages) {
      const view = message.role === "user" ? new UserView(message) : new AssistantView(message);
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

  // The boundary goes above the user message that started the turn which compacted.
  addBoundary(view, record, parent = this.list) {
    if (record.status !== "completed") return;
    const element = boundaryElement(record, view.messageId);
    const anchor = this.views.get(view.messageId - 1);
    const before = anchor && anchor.element.parentNode === parent ? anchor.element : view.element;
    parent.insertBefore(element, before.parentNode === parent ? before : null);
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

  async #older() {
    if (!this.hasMore || this.loadingOlder || !this.loadOlder) return;
    const before = this.oldestMessageId;
    if (before == null) return;
    const generation = this.generation;
    this.loadingOlder = true;
    this.olderStatus.hidden = false;
    this.olderStatus.textContent = "Loading earlier messages…";
    try {
      const page = await this.loadOlder(before);
      if (generation !== this.generation) return;
      this.prepend(page.items, page.has_more);
      this.olderStatus.hidden = true;
    } catch (error) {
      if (generation === this.generation) this.olderStatus.textContent = `Earlier messages could not be loaded: ${error.message}`;
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
