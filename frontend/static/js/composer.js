// The composer: multi-line input (Enter sends, Shift+Enter adds a line), attachments by picker
// or drag-and-drop with upload progress, Send while idle and Stop while a reply streams.
import { ApiError, api, uploadFile } from "./api.js";
import { formatBytes, h, icon } from "./format.js";

const MAX_INPUT_HEIGHT = 240;

export class Composer {
  // hooks: send(text, attachments) -> Promise, stop() -> Promise, conversationId() -> id|null
  constructor({ form, input, send, stop, attach, fileInput, chips, status, dropZone, overlay }, hooks) {
    Object.assign(this, { form, input, sendButton: send, stopButton: stop, attachButton: attach, fileInput, chips, status, dropZone, overlay, hooks });
    this.running = false;
    this.sending = false;
    this.uploads = []; // {file, chip, progress, attachment, state, abort}
    this.dragDepth = 0;
    this.#wire();
  }

  #wire() {
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.submit();
      }
    });
    this.input.addEventListener("input", () => this.autosize());
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

  autosize() {
    this.input.style.height = "auto";
    this.input.style.height = `${Math.min(MAX_INPUT_HEIGHT, this.input.scrollHeight)}px`;
  }

  say(text, kind = "info") {
    this.status.textContent = text ?? "";
    this.status.dataset.kind = kind;
  }

  focus() {
    this.input.focus();
  }

  // A reply is being written: no sending, Stop instead of Send.
  setRunning(running) {
    this.running = running;
    document.body.classList.toggle("turn-running", running);
    const hadFocus = document.activeElement === this.input || document.activeElement === this.stopButton;
    this.input.disabled = running;
    this.attachButton.disabled = running;
    this.sendButton.hidden = running;
    this.stopButton.hidden = !running;
    this.stopButton.disabled = false;
    this.stopButton.textContent = "Stop";
    this.#refresh();
    if (hadFocus) (running ? this.stopButton : this.input).focus();
  }

  #refresh() {
    const uploading = this.uploads.some((u) => u.state === "uploading");
    this.sendButton.disabled = this.running || this.sending || uploading;
    this.chips.hidden = this.uploads.length === 0;
  }

  addFiles(files) {
    for (const file of files) this.#upload(file);
  }

  #upload(file) {
    const progress = h("progress", { max: 100, value: 0, "aria-label": `Uploading ${file.name}` });
    const meta = h("span", { class: "chip-meta", text: `${formatBytes(file.size)} · uploading 0%` });
    const remove = h("button", { type: "button", class: "chip-remove", "aria-label": `Remove ${file.name}`, text: "×" });
    const chip = h("li", { class: "chip chip-uploading" }, icon("file"), h("span", { class: "chip-name", text: file.name }), meta, progress, remove);
    const entry = { file, chip, state: "uploading", attachment: null, abort: null };
    const handle = uploadFile(file, this.hooks.conversationId(), (loaded, total) => {
      const percent = Math.floor((loaded / total) * 100);
      progress.value = percent;
      meta.textContent = `${formatBytes(file.size)} · uploading ${percent}%`;
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
        const note = attachment.status === "failed" ? ` · text could not be read${attachment.note ? `: ${attachment.note}` : ""}` : " · ready";
        meta.textContent = `${formatBytes(attachment.size_bytes)}${note}`;
        this.#refresh();
      },
      (error) => {
        if (error.code === "aborted") return;
        entry.state = "failed";
        progress.remove();
        chip.className = "chip chip-failed";
        meta.textContent = `${formatBytes(file.size)} · upload failed: ${error.message}`;
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
    if (this.running || this.sending) return;
    if (this.uploads.some((u) => u.state === "uploading")) {
      this.say("Wait for the uploads to finish.");
      return;
    }
    const text = this.input.value;
    const ready = this.uploads.filter((u) => u.state === "ready");
    if (!text.trim() && !ready.length) return;
    this.sending = true;
    this.#refresh();
    this.say("");
    try {
      await this.hooks.send(text, ready.map((u) => u.attachment));
      this.input.value = "";
      this.autosize();
      for (const entry of this.uploads) entry.chip.remove();
      this.uploads = [];
    } catch (error) {
      this.say(error instanceof ApiError ? error.message : String(error), "error");
    } finally {
      this.sending = false;
      this.#refresh();
    }
  }

  async stop() {
    this.stopButton.disabled = true;
    this.stopButton.textContent = "Stopping…";
    try {
      await this.hooks.stop();
    } catch (error) {
      if (error.code !== "no_running_turn") this.say(error.message, "error");
      this.stopButton.disabled = false;
      this.stopButton.textContent = "Stop";
    }
  }
}
