// The transcript: the messages of the open conversation in order, with compaction boundaries,
// paging to older messages as the reader scrolls up (the view kept steady), following the end
// while a reply streams, and revealing a message (a search hit) however far back it is. Only a
// window of the loaded messages is in the page, the ones around the view: a long conversation
// drawn whole kept hundreds of thousands of elements (issue 35). The others wait as records and
// are drawn again when scrolling comes back to them.
import { boundaryElement } from "./boundary.js";
import { t } from "./i18n.js";
import { AssistantView, UserView } from "./message-views.js";

// The most messages in the page, and how many scrolling draws (and takes off) at a time.
const WINDOW = 80;
const STEP = 20;
// How near an edge of the drawn messages (px) the view comes before the next ones are drawn.
const MARGIN = 400;
// Views that stay while out of the window, the page still changing them: a reply being written
// (its stream) and a message being edited (its editor). They come back as they are.
const KEPT = '[data-status="running"], .editing';

export class Transcript {
  constructor({ scroller, list, topSentinel, bottomSentinel, olderStatus, emptyState, modelLabel }) {
    this.modelLabel = modelLabel;
    this.scroller = scroller;
    this.list = list;
    this.olderStatus = olderStatus;
    this.emptyState = emptyState;
    this.records = []; // every loaded message of the path shown, oldest first
    this.start = 0; // the window: records[start, end) are drawn
    this.end = 0;
    this.views = new Map(); // message id -> view: the window's, and the kept ones out of it
    this.lines = new Map();
    this.generation = 0;
    this.hasMore = false;
    this.loadingOlder = false;
    this.loadOlder = null; // set by the app: async (beforeMessageId) => {items, has_more}
    this.observer = new IntersectionObserver((entries) => {
      for (const entry of entries) {
        if (!entry.isIntersecting) continue;
        if (entry.target === topSentinel) this.#older();
        else this.#newer();
      }
    }, { root: scroller, rootMargin: `${MARGIN}px 0px` });
    this.observer.observe(topSentinel);
    this.observer.observe(bottomSentinel);
    // Whether the view follows new content: true while the reader is at the end.
    this.stick = true;
    this.scrollQueued = false;
    scroller.addEventListener("scroll", () => {
      this.stick = this.atEnd();
    }, { passive: true });
  }

  reset() {
    this.generation += 1; // pages still loading for the old view are dropped
    this.records = [];
    this.start = 0;
    this.end = 0;
    this.views.clear();
    this.lines = new Map(); // record key -> {element, firstKept, summarizes}
    this.list.replaceChildren();
    this.hasMore = false;
    this.olderStatus.hidden = true;
    this.emptyState.hidden = false;
  }

  get oldestMessageId() {
    return this.records[0]?.message_id ?? null;
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

  // The elements of records[from, to), in order: their kept views, or new ones.
  #draw(from, to) {
    const fragment = document.createDocumentFragment();
    for (const message of this.records.slice(from, to)) {
      let view = this.views.get(message.message_id);
      if (!view) {
        view = message.role === "user" ? new UserView(message) : new AssistantView(message, this.modelLabel);
        this.views.set(message.message_id, view);
      }
      fragment.append(view.element);
    }
    return fragment;
  }

  // Takes records[from, to) out of the page. Each record becomes what its view shows (a reply
  // finished while drawn), and the view goes unless it is kept.
  #undraw(from, to) {
    for (let i = from; i < to; i += 1) {
      const view = this.views.get(this.records[i].message_id);
      this.records[i] = view.message;
      view.element.remove();
      if (!view.element.matches(KEPT)) this.views.delete(view.message.message_id);
    }
  }

  // Draws records[from, to) in place of the window shown.
  #show(from, to) {
    this.#undraw(this.start, this.end);
    this.list.replaceChildren(this.#draw(from, to));
    this.start = from;
    this.end = to;
    this.#place();
  }

  // Draws up to a step of loaded messages above the window, and takes as many off its bottom.
  #drawAbove() {
    const from = Math.max(0, this.start - STEP);
    this.#keepingView(() => {
      this.list.prepend(this.#draw(from, this.start));
      this.start = from;
      const to = Math.min(this.end, from + WINDOW);
      this.#undraw(to, this.end);
      this.end = to;
      this.#place();
    });
    requestAnimationFrame(() => this.#fill());
  }

  // Draws up to a step of loaded messages below the window, and takes as many off its top.
  #drawBelow() {
    const to = Math.min(this.records.length, this.end + STEP);
    this.#keepingView(() => {
      this.list.append(this.#draw(this.end, to));
      this.end = to;
      this.#trimAbove();
      this.#place();
    });
    requestAnimationFrame(() => this.#fill());
  }

  #trimAbove() {
    const from = Math.max(this.start, this.end - WINDOW);
    this.#undraw(this.start, from);
    this.start = from;
  }

  // Runs `change` (messages drawn or taken off above the view) with the first message in view
  // left where it is on the screen.
  #keepingView(change) {
    const anchor = this.#firstInView();
    const top = anchor?.getBoundingClientRect().top;
    change();
    if (anchor?.isConnected) this.scroller.scrollTop += anchor.getBoundingClientRect().top - top;
  }

  #firstInView() {
    const top = this.scroller.getBoundingClientRect().top;
    for (const element of this.list.querySelectorAll(":scope > .msg")) {
      if (element.getBoundingClientRect().bottom > top) return element;
    }
    return null;
  }

  // Stored compaction records of messages just loaded.
  #takeBoundaries(messages) {
    for (const message of messages) {
      for (const record of message.result?.context_compactions ?? []) this.#register(message.message_id, record);
    }
  }

  // Shows the newest page and scrolls to the end.
  showPage(messages, hasMore) {
    this.reset();
    this.hasMore = hasMore;
    this.records = [...messages];
    this.#takeBoundaries(messages);
    this.#show(Math.max(0, messages.length - WINDOW), messages.length);
    this.emptyState.hidden = messages.length > 0;
    this.scrollToEnd();
    requestAnimationFrame(() => this.#fill());
  }

  // A new message at the end; the window goes back to the newest first if the reader left it.
  append(message) {
    if (this.end < this.records.length) this.#show(Math.max(0, this.records.length - WINDOW), this.records.length);
    this.records.push(message);
    this.#takeBoundaries([message]);
    this.list.append(this.#draw(this.end, this.end + 1));
    this.end += 1;
    this.#keepingView(() => this.#trimAbove());
    this.#place();
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
    this.#register(view.messageId, record);
    this.#place();
  }

  #register(messageId, record) {
    if (record.status !== "completed") return;
    const key = `${record.strategy ?? "summary_compact"} ${record.created_at}`;
    if (this.lines.has(key)) return;
    const element = boundaryElement(record, messageId);
    element.dataset.record = key;
    const summarizes = record.first_kept_message_id != null;
    this.lines.set(key, { element, firstKept: record.first_kept_message_id ?? messageId - 1, summarizes });
  }

  // Puts each line above the first loaded message it keeps, when that is in the window, and
  // marks the drawn messages above it. The kept message may be on an older page not loaded yet:
  // the line then heads the loaded messages (all of them are kept), and each page that scrolling
  // up loads moves it and gets marked.
  #place() {
    let summarizedBelow = 0;
    for (const { element, firstKept, summarizes } of this.lines.values()) {
      const at = this.#positionOf(firstKept);
      if (this.#inWindow(at)) {
        const below = at < this.end ? this.views.get(this.records[at].message_id).element : null;
        // Left where it is when in place: moving it would drop the focus on its summary.
        if (!element.isConnected || element.nextElementSibling !== below) this.list.insertBefore(element, below);
      } else {
        element.remove();
      }
      if (summarizes) summarizedBelow = Math.max(summarizedBelow, firstKept);
    }
    if (!summarizedBelow) return;
    for (const [messageId, view] of this.views) {
      if (messageId < summarizedBelow) view.element.classList.add("is-summarized");
    }
  }

  // Where a line above `messageId` goes: the index of the first loaded message from it on.
  #positionOf(messageId) {
    const at = this.records.findIndex((message) => message.message_id >= messageId);
    return at < 0 ? this.records.length : at;
  }

  // A line is in the window above one of its messages, or below the newest one.
  #inWindow(at) {
    return (this.start <= at && at < this.end) || at === this.end && at === this.records.length;
  }

  atEnd() {
    const s = this.scroller;
    return this.end === this.records.length && s.scrollHeight - s.scrollTop - s.clientHeight < 80;
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

  // Loads older pages until `messageId` is loaded, draws the window around it, then scrolls it
  // into view and marks it.
  async reveal(messageId) {
    const generation = this.generation;
    while (this.#indexOf(messageId) < 0 && this.hasMore && this.loadOlder) {
      if (this.loadingOlder) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        continue;
      }
      if (!(await this.#fetchOlder())) return false;
    }
    const at = this.#indexOf(messageId);
    if (at < 0 || generation !== this.generation) return false;
    if (at < this.start || at >= this.end) this.#showAround(at);
    this.stick = false;
    for (const found of this.list.querySelectorAll(".msg.is-found")) found.classList.remove("is-found");
    const { element } = this.views.get(messageId);
    element.classList.add("is-found");
    element.scrollIntoView({ block: "center" });
    return true;
  }

  #indexOf(messageId) {
    return this.records.findIndex((message) => message.message_id === messageId);
  }

  // A window with records[at] in its middle, as far as there are messages on each side.
  #showAround(at) {
    const to = Math.min(this.records.length, at + WINDOW / 2);
    this.#show(Math.max(0, to - WINDOW), to);
  }

  // Loads the page before the oldest loaded message into the records (not drawn yet); false
  // when another conversation is shown meanwhile.
  async #fetchOlder() {
    const generation = this.generation;
    this.loadingOlder = true;
    try {
      const page = await this.loadOlder(this.oldestMessageId);
      if (generation !== this.generation) return false;
      this.records.unshift(...page.items);
      this.start += page.items.length;
      this.end += page.items.length;
      this.#takeBoundaries(page.items);
      this.hasMore = page.has_more;
      return true;
    } finally {
      this.loadingOlder = false;
    }
  }

  // Near the top: the loaded messages above the window, or else the next older page.
  async #older() {
    if (this.start > 0) {
      this.#drawAbove();
      return;
    }
    if (!this.hasMore || this.loadingOlder || !this.loadOlder || !this.records.length) return;
    const generation = this.generation;
    this.olderStatus.hidden = false;
    this.olderStatus.textContent = t("Loading earlier messages…");
    try {
      if (!(await this.#fetchOlder())) return;
      this.olderStatus.hidden = true;
      this.#drawAbove();
    } catch (error) {
      if (generation === this.generation) this.olderStatus.textContent = t("Earlier messages could not be loaded: {message}", { message: error.message });
    }
  }

  // Near the bottom of the window while newer loaded messages are not drawn.
  #newer() {
    if (this.end < this.records.length) this.#drawBelow();
  }

  // While the drawn messages do not reach past an edge of the view, draw (or load) more.
  #fill() {
    const s = this.scroller;
    if (s.scrollTop < MARGIN && (this.start > 0 || this.hasMore)) this.#older();
    else if (s.scrollHeight - s.scrollTop - s.clientHeight < MARGIN) this.#newer();
  }
}
