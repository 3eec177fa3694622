// The transcript: the messages of the open conversation in order, with compaction boundaries,
// paging to older messages as the reader scrolls up (the view kept steady), following the end
// while a reply streams, and revealing a message (a search hit) however far back it is.
import { boundaryElement } from "./boundary.js";
import { t } from "./i18n.js";
import { AssistantView, UserView } from "./message-views.js";

export class Transcript {
  constructor({ scroller, list, topSentinel, olderStatus, emptyState, modelLabel }) {
    this.modelLabel = modelLabel;
    this.scroller = scroller;
    this.list = list;
    this.olderStatus = olderStatus;
    this.emptyState = emptyState;
    this.views = new Map();
    this.drawn = new Map();
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
    this.drawn = new Map(); // record key -> {element, firstKept, summarizes}
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
    return { fragment, made };
  }

  // Draws the stored compaction records of views just put in the list.
  #boundaries(made) {
    for (const view of made) {
      if (!(view instanceof AssistantView)) continue;
      for (const record of view.message.result?.context_compactions ?? []) this.#register(view, record);
    }
    this.#place();
  }

  // Shows the newest page and scrolls to the end.
  showPage(messages, hasMore) {
    this.reset();
    this.hasMore = hasMore;
    const { fragment, made } = this.#build(messages);
    this.list.append(fragment);
    this.#boundaries(made);
    this.emptyState.hidden = messages.length > 0;
    this.scrollToEnd();
    requestAnimationFrame(() => this.#fillUp());
  }

  prepend(messages, hasMore) {
    const fromBottom = this.scroller.scrollHeight - this.scroller.scrollTop;
    const { fragment, made } = this.#build(messages);
    this.list.prepend(fragment);
    this.#boundaries(made);
    this.hasMore = hasMore;
    this.scroller.scrollTop = this.scroller.scrollHeight - fromBottom;
  }

  append(message) {
    const { fragment, made } = this.#build([message]);
    this.list.append(fragment);
    this.#boundaries(made);
    this.emptyState.hidden = true;
    if (this.stick || message.role === "user") this.scrollToEnd();
    return this.views.get(message.message_id);
  }

  // The boundary goes above the first message the model still sees verbatim (the record's
  // `first_kept_message_id`; without one, the user message of the turn that compacted). The
  // messages above it stay shown in full, marked as summarized. A record is drawn once: a turn's
  // stream also carries the compaction made ahead of time that its history opens with, which
  // the reply before it stores (and a reload draws from there).
  addBoundary(view, record) {
    this.#register(view, record);
    this.#place();
  }

  #register(view, record) {
    if (record.status !== "completed") return;
    const key = `${record.strategy ?? "summary_compact"} ${record.created_at}`;
    if (this.drawn.has(key)) return;
    const element = boundaryElement(record, view.messageId);
    element.dataset.record = key;
    const summarizes = record.first_kept_message_id != null;
    this.drawn.set(key, { element, firstKept: record.first_kept_message_id ?? view.messageId - 1, summarizes });
  }

  // Puts each line above the first shown message it keeps, and marks the shown messages above
  // it. The kept message may be on an older page not loaded yet: the line then heads the list
  // (everything shown is kept), and each page that scrolling up loads moves it and gets marked.
  #place() {
    let summarizedBelow = 0;
    for (const { element, firstKept, summarizes } of this.drawn.values()) {
      const below = (this.views.get(firstKept) ?? this.#firstShownFrom(firstKept))?.element ?? null;
      // Left where it is when in place: moving it would drop the focus on its summary.
      if (!element.isConnected || element.nextElementSibling !== below) this.list.insertBefore(element, below);
      if (summarizes) summarizedBelow = Math.max(summarizedBelow, firstKept);
    }
    if (!summarizedBelow) return;
    for (const [messageId, view] of this.views) {
      if (messageId < summarizedBelow) view.element.classList.add("is-summarized");
    }
  }

  #firstShownFrom(messageId) {
    for (const element of this.list.querySelectorAll(":scope > .msg")) {
      if (Number(element.dataset.messageId) >= messageId) return this.views.get(Number(element.dataset.messageId));
    }
    return null;
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
