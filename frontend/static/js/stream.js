import { t } from "./i18n.js";
// Follows one turn over the resumable SSE stream and hands each event over exactly once.
//
// Every event id is `<turn_id>:<seq>` with seq 1, 2, ... without gaps. The browser's EventSource
// reconnects by itself after a dropped connection and sends Last-Event-ID, so the server resumes
// after the last event received. When the stream cannot continue on its own (a closed source,
// a gap in the numbering), it is reopened at `?after=<last seq>`: nothing is lost or repeated.

export const TERMINAL_EVENTS = new Set(["turn.completed", "turn.failed", "turn.cancelled"]);
const EVENT_NAMES = [
  "turn.started",
  "turn.restarted",
  "message.delta",
  "tool.started",
  "tool.completed",
  "approval.requested",
  "approval.decided",
  "context.metrics",
  "context.compaction",
  ...TERMINAL_EVENTS,
];
const MAX_BACKOFF_MS = 10_000;

export class TurnStream {
  // handlers: onEvent(name, data, {seq, receivedAt}), onConnection(state), onGiveUp()
  constructor(conversationId, turnId, handlers, afterSeq = 0) {
    this.conversationId = conversationId;
    this.turnId = turnId;
    this.handlers = handlers;
    this.lastSeq = afterSeq;
    this.source = null;
    this.closed = false;
    this.failures = 0;
    this.retryTimer = null;
    this.onOnline = () => this.#reconnectNow();
    window.addEventListener("online", this.onOnline);
  }

  open() {
    if (this.closed) return;
    this.#detach();
    const params = new URLSearchParams({ after: String(this.lastSeq) });
    if (this.turnId != null) params.set("turn_id", String(this.turnId));
    const url = `/api/conversations/${this.conversationId}/stream?${params}`;
    const source = new EventSource(url);
    this.source = source;
    for (const name of EVENT_NAMES) {
      source.addEventListener(name, (event) => this.#receive(name, event));
    }
    source.addEventListener("open", () => {
      this.failures = 0;
      this.handlers.onConnection?.("live");
    });
    source.addEventListener("error", () => this.#lost(source));
  }

  close() {
    this.closed = true;
    clearTimeout(this.retryTimer);
    window.removeEventListener("online", this.onOnline);
    this.#detach();
  }

  // For tests and the benchmark: behave as if the network dropped the connection.
  simulateDrop() {
    if (this.source) this.#lost(this.source, true);
  }

  #detach() {
    if (this.source) {
      this.source.close();
      this.source = null;
    }
  }

  #receive(name, event) {
    if (this.closed || event.target !== this.source) return;
    const [turn, position] = event.lastEventId.split(":");
    this.turnId ??= Number(turn); // followed as "the latest turn": pin it for reconnects
    const seq = Number(position);
    if (!(seq > this.lastSeq)) return; // already handed over
    if (seq !== this.lastSeq + 1) {
      this.open(); // a gap: re-read from the durable log after the last event we have
      return;
    }
    this.lastSeq = seq;
    const data = JSON.parse(event.data);
    this.handlers.onEvent(name, data, { seq, receivedAt: event.timeStamp || performance.now() });
    if (TERMINAL_EVENTS.has(name)) this.close();
  }

  #lost(source, forced = false) {
    if (this.closed || source !== this.source) return;
    if (!forced && source.readyState === EventSource.CONNECTING) {
      this.handlers.onConnection?.("reconnecting"); // the browser retries with Last-Event-ID
      return;
    }
    // Closed for good (an error status, or 204 with nothing left): reopen after a pause.
    this.#detach();
    this.failures += 1;
    if (this.failures > 8) {
      this.close();
      this.handlers.onGiveUp?.();
      return;
    }
    this.handlers.onConnection?.("reconnecting");
    const delay = forced ? 0 : Math.min(MAX_BACKOFF_MS, 500 * 2 ** (this.failures - 1));
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.open(), delay);
  }

  #reconnectNow() {
    if (!this.closed && !this.source) {
      clearTimeout(this.retryTimer);
      this.open();
    }
  }
}
