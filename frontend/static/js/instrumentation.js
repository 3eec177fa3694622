// Measurements the browser tests and `bench/bench_frontend.py` read from the page:
// `performance` marks for the first rendered page, and the time from receiving each stream
// event to the end of its DOM update. Cheap enough to stay on in production.

export const instrumentation = {
  eventToDom: [], // milliseconds, one per handled stream event
  firstPageMs: null, // since navigation start, when the newest page of messages was in the DOM
  stream: null, // the open TurnStream, if any
  streamedText: null, // (messageId) => the text deltas this page received for that message
};

export function markFirstPage() {
  if (instrumentation.firstPageMs != null) return;
  performance.mark("chat:first-page");
  instrumentation.firstPageMs = performance.now();
}

export function recordEvent(receivedAt) {
  instrumentation.eventToDom.push(performance.now() - receivedAt);
}

window.chatShell = instrumentation;
