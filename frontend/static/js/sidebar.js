// The conversation list: pinned ones first, then newest first in date groups (in the browser's
// time zone), keyset-paged on scroll, searchable by title, with new, rename, pin, archive and
// delete (with undo); an "Archived" view lists the archived ones. Selecting a conversation is
// left to the app (client-side routing).
import { api } from "./api.js";
import { h, icon } from "./format.js";
import { fill, t } from "./i18n.js";

const PAGE = 30;

// Every string this module shows (kept in one place for translation).
const TEXT = {
  groups: {
    pinned: t("Pinned"),
    today: t("Today"),
    yesterday: t("Yesterday"),
    week: t("Previous 7 days"),
    older: t("Older"),
    archived: t("Archived"),
  },
  empty: t("No conversations yet."),
  emptyArchived: t("No archived conversations."),
  noMatch: t("No conversation title matches."),
  branch: t("A branch of another conversation"),
  branchMark: t("Branch:"),
  running: t("A reply is being written"),
  newTitle: t("New title"),
  // A row's buttons, by action: the label (with the conversation's "{title}") and the icon.
  actions: {
    pin: [t("Pin “{title}”"), "pin"],
    unpin: [t("Unpin “{title}”"), "unpin"],
    rename: [t("Rename “{title}”"), "edit"],
    archive: [t("Archive “{title}”"), "archive"],
    unarchive: [t("Unarchive “{title}”"), "unarchive"],
    delete: [t("Delete “{title}”"), "trash"],
  },
  deleted: (title) => t("Deleted “{title}”.", { title }),
  archivedNotice: (title) => t("Archived “{title}”.", { title }),
  renameFailed: (reason) => t("The title could not be changed: {reason}", { reason }),
  deleteFailed: (reason) => t("The conversation could not be deleted: {reason}", { reason }),
  restoreFailed: (reason) => t("The conversation could not be brought back: {reason}", { reason }),
  changeFailed: (reason) => t("The conversation could not be changed: {reason}", { reason }),
};

// Display order of the groups; the server's order (pin, then last activity) agrees with it.
const GROUPS = Object.keys(TEXT.groups);

function groupOf(conversation, archivedView) {
  if (archivedView) return "archived";
  if (conversation.pinned) return "pinned";
  const at = new Date(conversation.updated_at);
  const day = new Date();
  day.setHours(0, 0, 0, 0); // local midnight; setDate below keeps it across DST changes
  if (at >= day) return "today";
  day.setDate(day.getDate() - 1);
  if (at >= day) return "yesterday";
  day.setDate(day.getDate() - 6);
  if (at >= day) return "week";
  return "older";
}

// Whether `a` lists above `b`: the server's order (pinned, last activity, id; newest first).
function listsBefore(a, b) {
  if (Boolean(a.pinned) !== Boolean(b.pinned)) return Boolean(a.pinned);
  const at = Date.parse(a.updated_at);
  const bt = Date.parse(b.updated_at);
  return at !== bt ? at > bt : a.id > b.id;
}

export class Sidebar {
  // hooks: open(id), deleted(id), renamed(conversation)
  constructor({ list, scroller, sentinel, empty, search, archivedToggle }, toast, hooks) {
    Object.assign(this, { list, scroller, sentinel, empty, search, archivedToggle, toast, hooks });
    this.cursor = null;
    this.done = false;
    this.loading = false;
    this.query = "";
    this.archived = false;
    this.currentId = null;
    this.items = new Map(); // id -> {conversation, element}
    this.groups = new Map(); // group key -> {element, list}
    this.generation = 0;
    this.observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.more();
    }, { root: scroller, rootMargin: "0px 0px 200px 0px" });
    this.observer.observe(sentinel);
    let timer = null;
    search.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => this.reload(search.value.trim()), 200);
    });
    archivedToggle.addEventListener("click", () => {
      this.archived = !this.archived;
      archivedToggle.setAttribute("aria-pressed", String(this.archived));
      this.reload();
    });
    list.addEventListener("click", (event) => this.#click(event));
  }

  async reload(query = this.query) {
    this.query = query;
    this.cursor = null;
    this.done = false;
    this.items.clear();
    this.groups.clear();
    this.list.replaceChildren();
    this.generation += 1;
    this.loading = false;
    await this.more();
  }

  async more() {
    if (this.loading || this.done) return;
    this.loading = true;
    const generation = this.generation;
    const params = new URLSearchParams({ limit: String(PAGE) });
    if (this.cursor) params.set("cursor", this.cursor);
    if (this.query) params.set("q", this.query);
    if (this.archived) params.set("archived", "true");
    try {
      const page = await api.get(`/api/conversations?${params}`);
      if (generation !== this.generation) return; // a newer search replaced this one
      for (const conversation of page.items) {
        if (!this.items.has(conversation.id)) this.#show(conversation);
      }
      this.cursor = page.next_cursor;
      this.done = !page.next_cursor;
    } finally {
      if (generation === this.generation) this.loading = false;
    }
    this.#updateEmpty();
    // The list does not fill the scroller yet: the sentinel stays visible, so ask again.
    if (!this.done && this.scroller.scrollHeight <= this.scroller.clientHeight + 200) this.more();
  }

  #updateEmpty() {
    this.empty.hidden = this.items.size > 0;
    this.empty.textContent = this.query ? TEXT.noMatch : this.archived ? TEXT.emptyArchived : TEXT.empty;
  }

  #group(key) {
    const known = this.groups.get(key);
    if (known) return known;
    const title = h("h2", { class: "conv-group-title", id: `conv-group-${key}`, text: TEXT.groups[key] });
    const list = h("ul", { class: "conv-group-list", "aria-labelledby": title.id });
    const element = h("li", { class: "conv-group", dataset: { group: key } }, title, list);
    const later = GROUPS.slice(GROUPS.indexOf(key) + 1)
      .map((other) => this.groups.get(other)?.element)
      .find(Boolean);
    this.list.insertBefore(element, later ?? null);
    const group = { element, list };
    this.groups.set(key, group);
    return group;
  }

  // Puts a conversation in its group, where the server's order places it among those shown.
  #show(conversation) {
    const element = this.#item(conversation);
    const { list } = this.#group(groupOf(conversation, this.archived));
    const next = [...list.children].find((other) =>
      listsBefore(conversation, this.items.get(Number(other.dataset.id)).conversation),
    );
    list.insertBefore(element, next ?? null);
    this.items.set(conversation.id, { conversation, element });
    this.empty.hidden = true;
    return element;
  }

  #remove(id) {
    const known = this.items.get(id);
    if (!known) return;
    const group = known.element.closest(".conv-group");
    known.element.remove();
    this.items.delete(id);
    if (group && !group.querySelector(".conv")) {
      group.remove();
      this.groups.delete(group.dataset.group);
    }
    this.#updateEmpty();
  }

  #belongs(conversation) {
    if (Boolean(conversation.archived) !== this.archived) return false;
    return !this.query || conversation.title.toLowerCase().includes(this.query.toLowerCase());
  }

  #item(conversation) {
    const { title } = conversation;
    const link = h("a", { class: "conv-link", href: `/c/${conversation.id}` }, h("span", { class: "conv-title", text: title }));
    if (conversation.forked_from) link.prepend(h("span", { class: "conv-fork", title: TEXT.branch }, icon("branch"), h("span", { class: "visually-hidden", text: TEXT.branchMark })));
    const button = (action) => {
      const [label, name] = TEXT.actions[action];
      return h("button", { type: "button", class: "icon-btn tiny", "data-action": action, "aria-label": fill(label, { title }) }, icon(name));
    };
    const element = h(
      "li",
      { class: "conv", dataset: { id: conversation.id } },
      link,
      h("span", { class: "conv-running", title: TEXT.running, hidden: !conversation.running_turn_id, text: "●" }),
      h(
        "span",
        { class: "conv-actions" },
        this.archived ? null : button(conversation.pinned ? "unpin" : "pin"),
        button("rename"),
        button(this.archived ? "unarchive" : "archive"),
        button("delete"),
      ),
    );
    this.#markCurrent(element);
    return element;
  }

  #markCurrent(element) {
    const current = Number(element.dataset.id) === this.currentId;
    element.classList.toggle("current", current);
    const link = element.querySelector(".conv-link");
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }

  setCurrent(id) {
    this.currentId = id;
    for (const { element } of this.items.values()) this.#markCurrent(element);
  }

  // A conversation just changed (new, sent to): shown again where it now lists. Its pin and
  // archive marks are the list's own (they change here), newer than the app's copy.
  upsert(conversation) {
    const known = this.items.get(conversation.id)?.conversation;
    this.#replace(known ? { ...conversation, pinned: known.pinned, archived: known.archived } : conversation);
  }

  // The item is drawn again (a title or time that changed): a focus inside it stays on the same
  // control of the new one, not thrown back to the top of the page.
  #replace(conversation) {
    const focused = this.items.get(conversation.id)?.element.contains(document.activeElement) ? document.activeElement : null;
    this.#remove(conversation.id);
    const shown = this.#belongs(conversation) ? this.#show(conversation) : null;
    if (focused) shown?.querySelector(focused.dataset.action ? `[data-action="${focused.dataset.action}"]` : ".conv-link")?.focus();
    return shown;
  }

  setRunning(id, running) {
    const known = this.items.get(id);
    if (known) known.element.querySelector(".conv-running").hidden = !running;
  }

  #click(event) {
    const element = event.target.closest(".conv");
    if (!element) return;
    const id = Number(element.dataset.id);
    const action = event.target.closest("[data-action]")?.dataset.action;
    if (action === "rename") return this.#rename(element, id);
    if (action === "delete") return this.#delete(id);
    if (action === "pin" || action === "unpin") return this.#change(id, { pinned: action === "pin" });
    if (action === "archive") return this.#archive(id);
    if (action === "unarchive") return this.#change(id, { archived: false });
    const link = event.target.closest("a.conv-link");
    if (link && !event.metaKey && !event.ctrlKey && !event.shiftKey && event.button === 0) {
      event.preventDefault();
      this.hooks.open(id);
    }
  }

  async #change(id, changes) {
    const known = this.items.get(id);
    let updated;
    try {
      updated = await api.patch(`/api/conversations/${id}`, changes);
    } catch (error) {
      this.toast.show(TEXT.changeFailed(error.message));
      return null;
    }
    const shown = this.#replace({ ...known?.conversation, ...updated });
    shown?.querySelector(`[data-action="${changes.pinned ? "unpin" : "pin"}"]`)?.focus();
    return updated;
  }

  async #archive(id) {
    const { conversation } = this.items.get(id);
    if (!(await this.#change(id, { archived: true }))) return;
    // Undo puts its pin back too (archiving cleared it).
    this.toast.show(TEXT.archivedNotice(conversation.title), () =>
      this.#change(id, { archived: false, pinned: Boolean(conversation.pinned) }),
    );
  }

  #rename(element, id) {
    const known = this.items.get(id);
    const link = element.querySelector(".conv-link");
    const input = h("input", { class: "conv-rename", "aria-label": TEXT.newTitle, maxlength: 200 });
    input.value = known.conversation.title;
    let finished = false;
    const finish = async (save) => {
      if (finished) return;
      finished = true;
      const title = input.value.trim();
      input.replaceWith(link);
      if (!save || !title || title === known.conversation.title) return link.focus();
      try {
        const updated = await api.patch(`/api/conversations/${id}`, { title });
        const shown = this.#replace({ ...known.conversation, ...updated });
        shown?.querySelector(".conv-link").focus();
        this.hooks.renamed?.(updated);
      } catch (error) {
        this.toast.show(TEXT.renameFailed(error.message));
        link.focus();
      }
    };
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") finish(true);
      if (event.key === "Escape") finish(false);
    });
    input.addEventListener("blur", () => finish(true));
    link.replaceWith(input);
    input.focus();
    input.select();
  }

  // The server deletes at once (a soft delete) and keeps the undo open for a few minutes
  // (POST .../restore): nothing waits on this page, so a closed tab, a crash or a lost network
  // never leaves a delete the user asked for undone, and the Undo is only a second request.
  async #delete(id) {
    const { conversation } = this.items.get(id);
    const wasOpen = id === this.currentId;
    this.#remove(id);
    this.hooks.deleted(id);
    const deleting = api.delete(`/api/conversations/${id}`);
    this.toast.show(TEXT.deleted(conversation.title), async () => {
      try {
        await deleting;
        const restored = await api.post(`/api/conversations/${id}/restore`);
        this.#replace({ ...conversation, ...restored })?.querySelector(".conv-link").focus();
        if (wasOpen) this.hooks.open(id);
      } catch (error) {
        this.toast.show(TEXT.restoreFailed(error.message));
      }
    });
    try {
      await deleting;
    } catch (error) {
      this.#replace(conversation);
      if (wasOpen) this.hooks.open(id);
      this.toast.show(TEXT.deleteFailed(error.message));
    }
  }
}
