// The buttons on messages: copy (a message or a code block), versions in place (regenerate,
// retry, edit-and-resend, the ‹2/3› switcher) and the decision on an "ask first" tool call.
import { api } from "./api.js";
import { t } from "./i18n.js";
import { copyText } from "./markdown.js";

function flash(button, text) {
  const before = button.textContent;
  button.textContent = text;
  setTimeout(() => {
    button.textContent = before;
  }, 1200);
}

// What the actions need from the page:
//   conversation()     the open conversation;    busy()            whether a reply is streaming;
//   open(id)           shows it again;           say(text, kind)   the composer's status line;
//   announce(text)     for screen readers;       focusComposer()   the message box;
//   admitted(post)     a send retried past 503;  modelFailed(code) an error of the local model.
export class MessageActions {
  constructor(list, page) {
    this.page = page;
    list.addEventListener("click", (event) => this.#click(event));
  }

  async #click(event) {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    const view = button.closest(".msg")?.view;
    // Pressed from the keyboard: the page drawn again has lost the button, so the focus goes on
    // from where that user is (a pointer's click leaves the focus, and a phone's keyboard, alone).
    const byKeyboard = button.matches(":focus-visible");
    const action = button.dataset.action;
    if (action === "copy" || action === "copy-code") {
      await copyText(action === "copy" ? view.copyText() : button.closest(".codeblock").querySelector("code").textContent);
      flash(button, t("Copied"));
    } else if (action === "approve" || action === "deny") {
      await this.#decide(button, action === "approve");
    } else if (this.page.busy()) {
      // Versions change only between replies.
    } else if (action === "regenerate") {
      this.#regenerate(view, byKeyboard);
    } else if (action === "edit") {
      view.startEditing((text) => this.#editAndResend(view, text));
    } else if (action === "show-version") {
      this.#showVersion(Number(button.dataset.messageId), byKeyboard && button.getAttribute("aria-label"));
    }
  }

  // Versions in place: `post(conversationId)` makes the change, then the page shows the
  // conversation's current path again. Whether it was made; if not, `failed(reason)` is said.
  async #changeVersions(post, failed) {
    const { id } = this.page.conversation();
    try {
      await post(id);
      await this.page.open(id);
      return true;
    } catch (error) {
      this.page.say(failed(error.message), "error");
      this.page.modelFailed(error.code);
      return false;
    }
  }

  async #regenerate(view, byKeyboard) {
    const made = await this.#changeVersions(
      (id) => this.page.admitted(() => api.post(`/api/conversations/${id}/regenerate`, { message_id: view.message.message_id })),
      (message) => t("Could not write a new version: {message}", { message }),
    );
    if (!made) return;
    if (byKeyboard) this.page.focusComposer(); // beside Stop, while the new version is written
    this.page.announce(t("Writing a new version of the reply."));
  }

  #editAndResend(view, text) {
    return this.#changeVersions(
      (id) => api.post(`/api/conversations/${id}/messages`, { content: text, edits: view.message.message_id }),
      (message) => t("Could not send the edited message: {message}", { message }),
    );
  }

  // `pressed`: the label of the step pressed from the keyboard (‹ or ›), which keeps the focus.
  async #showVersion(messageId, pressed) {
    const made = await this.#changeVersions(
      (id) => api.post(`/api/conversations/${id}/versions`, { message_id: messageId }),
      (message) => t("Could not show that version: {message}", { message }),
    );
    if (!made) return;
    if (pressed) {
      // The same step of the version shown, or the other one at the end of the row.
      const steps = [...document.querySelectorAll(`.msg[data-message-id="${messageId}"] [data-action="show-version"]`)].filter((b) => !b.disabled);
      (steps.find((b) => b.getAttribute("aria-label") === pressed) ?? steps[0])?.focus();
    }
    this.page.announce(t("Showing another version."));
  }

  // The decision on an "ask first" call; the block changes when its `approval.decided` arrives.
  async #decide(button, allow) {
    const buttons = button.parentElement.querySelectorAll("button");
    for (const each of buttons) each.disabled = true;
    try {
      await api.post(`/api/conversations/${this.page.conversation().id}/approvals`, { call_id: button.dataset.callId, allow });
    } catch (error) {
      for (const each of buttons) each.disabled = false;
      this.page.say(t("The decision was not sent: {message}", { message: error.message }), "error");
    }
  }
}
