// The embedded local model's state on the chat page, from the server's one account of it (the
// boot data, then `/readyz`): while the model starts, restarts or has failed, a notice says so
// and sending is held back; the state is polled until the model is ready or has failed.
import { t } from "./i18n.js";
const POLL_MS = 1000;

// The server's status message is English; the page says the same in its own language.
function describe(status) {
  const model = status.model;
  if (status.state === "starting") return t("The local model ({model}) is starting…", { model });
  if (status.state === "restarting") return t("The local model ({model}) stopped ({reason}) and is restarting…", { model, reason: status.reason });
  return t("The local model ({model}) failed: {reason}. Its log is {log}.", { model, reason: status.reason, log: status.log_path });
}

export class LocalModelNotice {
  // composer: has setBlocked(text|null); status: the boot data's `local_model` (null: none runs)
  constructor(element, composer, status) {
    Object.assign(this, { element, composer, timer: null });
    this.show(status);
  }

  show(status) {
    const waiting = status && status.state !== "ready";
    this.element.hidden = !waiting;
    const message = waiting ? describe(status) : null;
    this.element.textContent = message ?? "";
    this.element.dataset.state = status?.state ?? "";
    this.composer.setBlocked(message);
    clearTimeout(this.timer);
    if (waiting && status.state !== "failed") this.timer = setTimeout(() => this.refresh(), POLL_MS);
  }

  // Asks again: after a send or a reply failed because of the local model.
  async refresh() {
    clearTimeout(this.timer);
    let body = null;
    try {
      body = await (await fetch("/readyz", { headers: { Accept: "application/json" } })).json();
    } catch {
      body = null; // the service itself is unreachable; try again
    }
    if (body && "local_model" in body) this.show(body.local_model);
    else this.timer = setTimeout(() => this.refresh(), POLL_MS);
  }
}
