// The conversation list: newest first, keyset-paged on scroll, searchable by title, with
// new, rename and delete. Selecting a conversation is left to the app (client-side routing).
import { api } from "./api.js";
import { h, icon } from "./format.js";
import { t } from "./i18n.js";

const PAGE = 30;

export class Sidebar {
  // hooks: open(id), deleted(id)
  constructor({ list, scroller, sentinel, empty, search }, hooks) {
    Object.assign(this, { list, scroller, sentinel, empty, search, hooks });
    this.cursor = null;
    this.done = false;
    this.loading = false;
    this.query = "";
    this.currentId = null;
    this.items = new Map(); // id -> {conversation, element}
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
    list.addEventListener("click", (event) => this.#click(event));
  }

  async reload(query = this.query) {
    this.query = query;
    this.cursor = null;
    this.done = false;
    this.items.clear();
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
    try {
      const page = await api.get(`/api/conversations?${params}`);
      if (generation !== this.generation) return; // a newer search replaced this one
      for (const conversation of page.items) {
        if (!this.items.has(conversation.id)) this.list.append(this.#item(conversation));
      }
      this.cursor = page.next_cursor;
      this.done = !page.next_cursor;
    } finally {
      if (generation === this.generation) this.loading = false;
    }
    this.empty.hidden = this.items.size > 0;
    this.empty.textContent = this.query ? t("No conversation title matches.") : t("No conversations yet.");
    // The list does not fill the scroller yet: the sentinel stays visible, so ask again.
    if (!this.done && this.scroller.scrollHeight <= this.scroller.clientHeight + 200) this.more();
  }

  #item(conversation) {
    const link = h("a", { class: "conv-link", href: `/c/${conversation.id}` }, h("span", { class: "conv-title", text: conversation.title }));
    if (conversation.forked_from) link.prepend(h("span", { class: "conv-fork", title: t("A branch of another conversation") }, icon("branch"), h("span", { class: "visually-hidden", text: t("Branch:") })));
    const element = h(
      "li",
      { class: "conv", dataset: { id: conversation.id } },
      link,
      h("span", { class: "conv-running", title: t("A reply is being written"), hidden: !conversation.running_turn_id, text: "●" }),
      h(
        "span",
        { class: "conv-actions" },
        h("button", { type: "button", class: "icon-btn tiny", "data-action": "rename", "aria-label": t("Rename “{title}”", { title: conversation.title }) }, icon("edit")),
        h("button", { type: "button", class: "icon-btn tiny", "data-action": "delete", "aria-label": t("Delete “{title}”", { title: conversation.title }) }, icon("trash")),
      ),
    );
    this.items.set(conversation.id, { conversation, element });
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

  // A conversation just changed (new, sent to, renamed): it moves to the top.
  upsert(conversation) {
    const known = this.items.get(conversation.id);
    known?.element.remove();
    this.items.delete(conversation.id);
    if (this.query && !conversation.title.toLowerCase().includes(this.query.toLowerCase())) return;
    this.list.prepend(this.#item(conversation));
    this.empty.hidden = true;
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
    const link = event.target.closest("a.conv-link");
    if (link && !event.metaKey && !event.ctrlKey && !event.shiftKey && event.button === 0) {
      event.preventDefault();
      this.hooks.open(id);
    }
  }

  #rename(element, id) {
    const known = this.items.get(id);
    const link = element.querySelector(".conv-link");
    const input = h("input", { class: "conv-rename", "aria-label": t("New title"), maxlength: 200 });
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
        known.conversation = { ...known.conversation, ...updated };
        link.querySelector(".conv-title").textContent = updated.title;
        for (const button of element.querySelectorAll("[data-action]")) {
          button.setAttribute("aria-label", button.dataset.action === "rename" ? t("Rename “{title}”", { title: updated.title }) : t("Delete “{title}”", { title: updated.title }));
        }
        this.hooks.renamed?.(updated);
      } catch (error) {
        window.alert(t("The title could not be changed: {message}", { message: error.message }));
      }
      link.focus();
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

  async #delete(id) {
    const known = this.items.get(id);
    if (!window.confirm(t("Delete “{title}”? This cannot be undone.", { title: known.conversation.title }))) return;
    try {
      await api.delete(`/api/conversations/${id}`);
    } catch (error) {
      window.alert(t("The conversation could not be deleted: {message}", { message: error.message }));
      return;
    }
    known.element.remove();
    this.items.delete(id);
    this.empty.hidden = this.items.size > 0;
    this.hooks.deleted(id);
  }
}
