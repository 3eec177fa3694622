// The composer: multi-line input (Enter sends, Shift+Enter adds a line; on touch screens Enter
// adds a line and the Send button sends), attachments by picker or drag-and-drop with upload
// progress, and Stop while a reply streams. The box stays usable while a reply streams: a
// message sent then waits for the reply to end. The box empties when a message is sent and the
// text comes back with the error when the send fails, so no word is lost.
import { ApiError, api, uploadFile } from "./api.js";
import { fileIcon, formatBytes, h } from "./format.js";
import { t } from "./i18n.js";

const MAX_INPUT_HEIGHT = 240;
const TOUCH = window.matchMedia("(pointer: coarse)");
// The narrow layout of app.css: a placeholder short enough for one line.
const NARROW = window.matchMedia("(max-width: 760px)");

export class Composer {
  // hooks: send(text, attachments) -> Promise, stop() -> Promise, conversationId() -> id|null
  constructor({ form, input, send, stop, attach, fileInput, chips, status, dropZone, overlay }, hooks) {
    Object.assign(this, { form, input, sendButton: send, stopButton: stop, attachButton: attach, fileInput, chips, status, dropZone, overlay, hooks });
    this.running = false;
    this.sending = false;
    this.queued = null; // {text, entries}: sent when the running reply ends
    this.blocked = null; // why sending is held back (the local model is not ready), or null
    this.connectionLost = false; // the "reconnecting" warning is what the status line says
    this.uploads = []; // {file, chip, progress, attachment, state, abort}
    this.dragDepth = 0;
    this.#wire();
    this.input.disabled = false; // the page's markup holds it until now
  }

  #wire() {
    // Pressing Send or Stop leaves the focus (and a phone's keyboard) in the box.
    for (const button of [this.sendButton, this.stopButton]) {
      button.addEventListener("pointerdown", (event) => event.preventDefault());
    }
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.input.focus(); // after a tap on Send, typing goes on in the box
      this.submit();
    });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing && !TOUCH.matches) {
        event.preventDefault();
        this.submit();
      }
    });
    this.input.addEventListener("input", () => this.autosize());
    this.#hint();
    TOUCH.addEventListener("change", () => this.#hint());
    NARROW.addEventListener("change", () => this.#hint());
    this.stopButton.addEventListener("click", () => this.stop());
    this.attachButton.addEventListener("click", () => this.fileInput.click());
    this.fileInput.addEventListener("change", () => {
      this.addFiles([...this.fileInput.files]);
      this.fileInput.value = "";
    });
    const hasFiles = (event) => [...(event.dataTransfer?.types ?? [])].includes("Files");
    this.dropZone.addEventListener("dragenter", (event) => {
      if (!hasFiles(event)) return;
      event.preventDefault();
      this.dragDepth += 1;
      this.overlay.hidden = false;
    });
    this.dropZone.addEventListener("dragover", (event) => {
      if (!hasFiles(event)) return;
      event.preventDefault();
      event.dataTransfer.dropEffect = "copy";
    });
    this.dropZone.addEventListener("dragleave", () => {
      this.dragDepth = Math.max(0, this.dragDepth - 1);
      if (this.dragDepth === 0) this.overlay.hidden = true;
    });
    this.dropZone.addEventListener("drop", (event) => {
      if (!hasFiles(event)) return;
      event.preventDefault();
      this.dragDepth = 0;
      this.overlay.hidden = true;
      this.addFiles([...event.dataTransfer.files]);
    });
  }

  #hint() {
    this.input.placeholder = NARROW.matches
      ? t("Message…")
      : TOUCH.matches
        ? t("Message… (Send button sends)")
        : t("Message… (Enter sends, Shift+Enter adds a line)");
    this.autosize();
  }

  autosize() {
    this.input.style.height = "auto";
    this.input.style.height = `${Math.min(MAX_INPUT_HEIGHT, this.input.scrollHeight)}px`;
  }

  say(text, kind = "info") {
    this.connectionLost = false;
    this.status.textContent = text ?? "";
    this.status.dataset.kind = kind;
  }

  focus() {
    this.input.focus();
  }

  // The reply's stream lost or regained its connection. Regaining it takes back only the
  // warning that losing it put up: a queued message's notice (or an error) stays.
  connection(lost) {
    if (lost) {
      this.say(t("Connection lost; reconnecting…"), "warning");
      this.connectionLost = true;
      return;
    }
    if (!this.connectionLost) return;
    this.connectionLost = false;
    if (this.queued) this.#sayQueued();
    else this.say("");
  }

  // A reply is being written: Stop beside Send, the box stays as it is (and keeps the focus);
  // a message sent meanwhile goes once the reply ends.
  setRunning(running) {
    this.running = running;
    document.body.classList.toggle("turn-running", running);
    this.stopButton.hidden = !running;
    this.stopButton.disabled = false;
    this.stopButton.textContent = t("Stop");
    this.#refresh();
    if (!running && this.queued) this.#sendQueued();
  }

  // Sending held back with a reason the page shows elsewhere; null allows it again.
  setBlocked(reason) {
    this.blocked = reason;
    this.#refresh();
  }

  #refresh() {
    const uploading = this.uploads.some((u) => u.state === "uploading");
    // aria-disabled, not disabled: a tap on a disabled button takes the focus from the box (and
    // closes a phone's keyboard); `submit` ignores the press itself.
    const held = this.sending || Boolean(this.queued) || uploading || Boolean(this.blocked);
    this.sendButton.setAttribute("aria-disabled", String(held));
    this.chips.hidden = this.uploads.length === 0;
  }

  addFiles(files) {
    for (const file of files) this.#upload(file);
  }

  #upload(file) {
    const progress = h("progress", { max: 100, value: 0, "aria-label": t("Uploading {name}", { name: file.name }) });
    const meta = h("span", { class: "chip-meta", text: t("{size} · uploading 0%", { size: formatBytes(file.size) }) });
    const remove = h("button", { type: "button", class: "chip-remove", "aria-label": t("Remove {name}", { name: file.name }), text: "×" });
    const chip = h("li", { class: "chip chip-uploading" }, fileIcon(file.type, file.name), h("span", { class: "chip-name", text: file.name }), meta, progress, remove);
    const entry = { file, chip, state: "uploading", attachment: null, abort: null };
    const handle = uploadFile(file, this.hooks.conversationId(), (loaded, total) => {
      const percent = Math.floor((loaded / total) * 100);
      progress.value = percent;
      meta.textContent = t("{size} · uploading {percent}%", { size: formatBytes(file.size), percent });
    });
    entry.abort = handle.abort;
    remove.addEventListener("click", () => this.#remove(entry));
    this.uploads.push(entry);
    this.chips.append(chip);
    this.#refresh();
    handle.promise.then(
      (attachment) => {
        entry.state = "ready";
        entry.attachment = attachment;
        progress.value = 100;
        progress.remove();
        chip.className = `chip chip-${attachment.status}`;
        chip.dataset.attachmentId = attachment.id;
        const size = formatBytes(attachment.size_bytes);
        if (attachment.status !== "failed" && attachment.kind === "image") meta.textContent = this.hooks.acceptsImages() ? t("{size} · ready · the model sees this image", { size }) : t("{size} · ready · this model cannot see images, only the file's name and type", { size });
        else if (attachment.status !== "failed") meta.textContent = t("{size} · ready", { size });
        else if (attachment.note) meta.textContent = t("{size} · text could not be read: {note}", { size, note: attachment.note });
        else meta.textContent = t("{size} · text could not be read", { size });
        this.#refresh();
      },
      (error) => {
        if (error.code === "aborted") return;
        entry.state = "failed";
        progress.remove();
        chip.className = "chip chip-failed";
        meta.textContent = t("{size} · upload failed: {message}", { size: formatBytes(file.size), message: error.message });
        this.#refresh();
      },
    );
  }

  #remove(entry) {
    if (entry.state === "uploading") entry.abort();
    if (entry.attachment) api.delete(`/api/attachments/${entry.attachment.id}`).catch(() => null);
    entry.chip.remove();
    this.uploads = this.uploads.filter((u) => u !== entry);
    this.#refresh();
  }

  async submit() {
    if (this.sending || this.queued || this.blocked) return;
    if (this.uploads.some((u) => u.state === "uploading")) {
      this.say(t("Wait for the uploads to finish."));
      return;
    }
    const text = this.input.value;
    const entries = this.uploads.filter((u) => u.state === "ready");
    if (!text.trim() && !entries.length) return;
    this.#take(entries);
    if (this.running) {
      this.queued = { text, entries };
      this.#refresh();
      this.#sayQueued();
      return;
    }
    await this.#deliver(text, entries);
  }

  // The draft leaves the box the moment it is sent; what is typed next is a new draft.
  #take(entries) {
    this.input.value = "";
    this.autosize();
    for (const entry of entries) entry.chip.remove();
    this.uploads = this.uploads.filter((u) => !entries.includes(u));
    this.#refresh();
  }

  // A send that failed (or was withdrawn): its text goes back above whatever was typed since.
  #restore(text, entries) {
    const typed = this.input.value;
    this.input.value = typed ? `${text}\n${typed}` : text;
    this.autosize();
    for (const entry of entries) this.chips.append(entry.chip);
    this.uploads = [...entries, ...this.uploads];
    this.#refresh();
  }

  #sayQueued() {
    const withdraw = h("button", { type: "button", class: "btn ghost tiny", text: t("Edit it") });
    withdraw.addEventListener("click", () => {
      this.withdrawQueued();
      this.input.focus();
    });
    this.connectionLost = false;
    this.status.replaceChildren(t("Your message is sent when this reply ends (or Stop it now). "), withdraw);
    this.status.dataset.kind = "info";
  }

  // Another conversation opens: a message waiting for this one's reply goes back into the box.
  withdrawQueued() {
    if (!this.queued) return;
    const { text, entries } = this.queued;
    this.queued = null;
    this.#restore(text, entries);
    this.say("");
  }

  #sendQueued() {
    const { text, entries } = this.queued;
    this.queued = null;
    this.say("");
    this.#deliver(text, entries);
  }

  async #deliver(text, entries) {
    this.sending = true;
    this.#refresh();
    this.say("");
    try {
      await this.hooks.send(text, entries.map((u) => u.attachment));
    } catch (error) {
      this.#restore(text, entries);
      this.say(error instanceof ApiError ? error.message : String(error), "error");
    } finally {
      this.sending = false;
      this.#refresh();
    }
  }

  async stop() {
    // Stop is disabled now and hidden once the turn ends: a keyboard press on it goes on in the box.
    if (document.activeElement === this.stopButton) this.input.focus();
    this.stopButton.disabled = true;
    this.stopButton.textContent = t("Stopping…");
    try {
      await this.hooks.stop();
    } catch (error) {
      if (error.code !== "no_running_turn") this.say(error.message, "error");
      this.stopButton.disabled = false;
      this.stopButton.textContent = t("Stop");
    }
  }
}
