// The embedded local model's state on the chat page, from the server's one account of it (the
// boot data, then `/readyz`): while the model starts, restarts or has failed, a notice says so
// and sending is held back; the state is polled until the model is ready or has failed.
const POLL_MS = 1000;

export class LocalModelNotice {
  // composer: has setBlocked(text|null); status: the boot data's `local_model` (null: none runs)
  constructor(element, composer, status) {
    Object.assign(this, { element, composer, timer: null });
    this.show(status);
  }

  show(status) {
    const waiting = status && status.state !== "ready";
    this.element.hidden = !waiting;
    this.element.textContent = waiting ? status.message : "";
    this.element.dataset.state = status?.state ?? "";
    this.composer.setBlocked(waiting ? status.message : null);
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
