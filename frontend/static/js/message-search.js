// Search over the text of every message of the user's conversations (GET /api/search), from
// the sidebar's search box: hits with the match highlighted; choosing one opens its
// conversation at that message. The title filter of the list below works as before.
import { api } from "./api.js";
import { h } from "./format.js";
import { t } from "./i18n.js";

export class MessageSearch {
  // open(conversationId, messageId): show that message
  constructor({ input, region, list, status }, open) {
    Object.assign(this, { input, region, list, status, open });
    this.generation = 0;
    let timer = null;
    input.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => this.run(input.value.trim()), 250);
    });
    list.addEventListener("click", (event) => {
      const link = event.target.closest("a[data-conversation]");
      if (!link) return;
      event.preventDefault();
      this.open(Number(link.dataset.conversation), Number(link.dataset.message));
    });
  }

  async run(query) {
    const generation = ++this.generation;
    if (!query) {
      this.region.hidden = true;
      this.list.replaceChildren();
      return;
    }
    this.region.hidden = false;
    let data;
    try {
      data = await api.get(`/api/search?${new URLSearchParams({ q: query })}`);
    } catch (error) {
      if (generation === this.generation) {
        this.list.replaceChildren();
        this.status.textContent = error.message;
      }
      return;
    }
    if (generation !== this.generation) return; // a newer search replaced this one
    this.list.replaceChildren(...data.items.map((hit) => this.#item(hit)));
    this.status.textContent = data.items.length ? "" : t("No message contains that.");
  }

  #item(hit) {
    const who = hit.role === "user" ? t("You") : t("Assistant");
    const snippet = h("span", { class: "hit-snippet" }, hit.snippet.before, h("mark", { text: hit.snippet.match }), hit.snippet.after);
    return h(
      "li",
      { class: "hit" },
      h(
        "a",
        { href: `/c/${hit.conversation_id}`, dataset: { conversation: hit.conversation_id, message: hit.message_id } },
        h("span", { class: "hit-title", text: t("{title} · {who}", { title: hit.conversation_title, who }) }),
        snippet,
      ),
    );
  }
}
