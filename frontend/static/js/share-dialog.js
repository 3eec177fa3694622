// "Share": read-only links to the conversation as it is now (`POST .../shares`), listed with
// Copy and Revoke. A link shows the current path up to this moment, never later messages.
import { api } from "./api.js";
import { formatTime, h } from "./format.js";
import { copyText } from "./markdown.js";
import { t } from "./i18n.js";

export class ShareDialog {
  constructor(conversationId) {
    this.conversationId = conversationId;
    this.withFiles = h("input", { type: "checkbox", id: "share-with-files" });
    this.create = h("button", { type: "button", class: "btn primary", text: t("Create link") });
    this.status = h("p", { class: "small", role: "status" });
    this.list = h("ul", { class: "share-links", "aria-label": t("Share links") });
    const close = h("button", { type: "button", class: "btn ghost", text: t("Close") });
    this.dialog = h(
      "dialog",
      { class: "model-view share-dialog", "aria-labelledby": "share-dialog-title" },
      h("div", { class: "model-view-head" }, h("h2", { id: "share-dialog-title", text: t("Share this conversation") }), close),
      h("p", { class: "muted small", text: t("Anyone with a link can read this conversation as it is now, without an account. Messages you send later are not shared. Revoke a link to end it.") }),
      h("p", {}, h("label", { for: "share-with-files" }, this.withFiles, " ", t("List the names of attached files (never their contents)"))),
      this.create,
      this.status,
      this.list,
    );
    close.addEventListener("click", () => this.dialog.close());
    this.dialog.addEventListener("close", () => this.dialog.remove());
    this.create.addEventListener("click", () => this.#create());
    document.body.append(this.dialog);
  }

  get base() {
    return `/api/conversations/${this.conversationId}/shares`;
  }

  async show() {
    this.dialog.showModal();
    try {
      const { items } = await api.get(this.base);
      // A link created while the list loaded stays: the list may have been read before it.
      const listed = new Set(items.map((link) => link.token));
      const madeMeanwhile = [...this.list.children].filter((row) => !listed.has(row.dataset.token));
      this.list.replaceChildren(...items.map((link) => this.#row(link)), ...madeMeanwhile);
    } catch (error) {
      this.status.textContent = t("The links could not be loaded: {message}", { message: error.message });
    }
  }

  async #create() {
    this.create.disabled = true;
    try {
      const link = await api.post(this.base, { include_attachments: this.withFiles.checked });
      const row = this.#row(link);
      this.list.append(row);
      this.status.textContent = t("Link created.");
      row.querySelector("input").select();
    } catch (error) {
      this.status.textContent = t("No link was created: {message}", { message: error.message });
    } finally {
      this.create.disabled = false;
    }
  }

  #row(link) {
    const url = new URL(link.path, location.origin).href;
    const field = h("input", { type: "text", readonly: true, class: "share-url", "aria-label": t("Share link"), value: url });
    const copy = h("button", { type: "button", class: "btn ghost tiny", text: t("Copy") });
    const revoke = h("button", { type: "button", class: "btn ghost tiny", text: t("Revoke") });
    const created = formatTime(link.created_at);
    const said = link.include_attachments ? t("{created} · lists file names", { created }) : created;
    const row = h("li", { class: "share-link", dataset: { token: link.token } }, field, copy, revoke, h("span", { class: "muted small", text: said }));
    copy.addEventListener("click", async () => {
      await copyText(url);
      this.status.textContent = t("Link copied.");
    });
    revoke.addEventListener("click", async () => {
      try {
        await api.delete(`/api/shares/${link.token}`);
        row.remove();
        this.status.textContent = t("Link revoked: it no longer opens.");
      } catch (error) {
        this.status.textContent = t("The link was not revoked: {message}", { message: error.message });
      }
    });
    return row;
  }
}
