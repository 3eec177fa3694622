// The tools panel: the MCP servers this deployment offers, whether each is reachable, its tools,
// and which ones this conversation uses; a server or a single tool can be marked "ask first" (each
// call waits for the user's Allow / Deny in the transcript). A checkbox change is stored at once
// and applies from the conversation's next turn; a deployment without MCP servers shows no panel.
import { api } from "./api.js";
import { t } from "./i18n.js";

const STATUS_TEXT = { available: "available", unavailable: "unavailable", connecting: "connecting…" };

export class ToolsPanel {
  // menu: the <details> holding the panel; list: where the servers go; status: a line for errors
  constructor(menu, list, status) {
    Object.assign(this, { menu, list, status, conversationId: null, ticket: 0 });
    list.addEventListener("change", () => this.store());
    menu.addEventListener("toggle", () => {
      if (menu.open && this.conversationId != null) this.load();
    });
  }

  async show(conversationId) {
    this.conversationId = conversationId;
    if (conversationId == null) {
      this.menu.hidden = true;
      this.menu.open = false;
      return;
    }
    await this.load();
  }

  async load() {
    const ticket = ++this.ticket;
    try {
      const panel = await api.get(`/api/conversations/${this.conversationId}/mcp-servers`);
      if (ticket === this.ticket) this.render(panel);
    } catch (error) {
      if (ticket !== this.ticket) return;
      this.menu.hidden = false;
      this.say(t("The tools could not be listed: {message}", { message: error.message }));
    }
  }

  async store() {
    const checked = (kind) => [...this.list.querySelectorAll(`input[data-kind=${kind}]:checked`)].map((box) => box.value);
    const ticket = ++this.ticket;
    try {
      const body = { servers: checked("server"), ask_first: checked("ask-first") };
      const panel = await api.put(`/api/conversations/${this.conversationId}/mcp-servers`, body);
      if (ticket === this.ticket) this.render(panel);
    } catch (error) {
      if (ticket === this.ticket) this.say(t("The choice was not saved: {message}", { message: error.message }));
    }
  }

  say(text) {
    this.status.textContent = text;
    this.status.hidden = !text;
  }

  render(panel) {
    this.menu.hidden = panel.servers.length === 0;
    this.say("");
    const askFirst = new Set(panel.ask_first ?? []);
    this.list.replaceChildren(...panel.servers.map((server) => this.serverItem(server, askFirst)));
  }

  serverItem(server, askFirst) {
    const item = document.createElement("li");
    item.className = "tool-server";
    item.dataset.server = server.name;
    item.dataset.status = server.status;
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.dataset.kind = "server";
    box.value = server.name;
    box.checked = server.enabled;
    const name = document.createElement("span");
    name.className = "tool-server-name";
    name.textContent = server.name;
    const state = document.createElement("span");
    state.className = "tool-server-status";
    state.textContent = STATUS_TEXT[server.status] ?? server.status;
    if (server.error) state.title = server.error;
    label.append(box, name, state);
    const tools = document.createElement("ul");
    tools.className = "tool-names muted small";
    if (server.tools.length) tools.append(...server.tools.map((tool) => askFirstItem("li", tool.name, tool.name, askFirst)));
    else tools.textContent = server.status === "available" ? t("no tools") : t("tools appear once it is reachable");
    const heading = document.createElement("p");
    heading.className = "ask-first-heading muted small";
    heading.textContent = t("Ask first (each call waits for your Allow):");
    item.append(label, heading, askFirstItem("div", server.name, t("all its tools"), askFirst), tools);
    return item;
  }
}

// A checkbox marking a server or a tool "ask first".
function askFirstItem(tag, name, text, askFirst) {
  const item = document.createElement(tag);
  item.className = "ask-first";
  const label = document.createElement("label");
  const box = document.createElement("input");
  box.type = "checkbox";
  box.dataset.kind = "ask-first";
  box.value = name;
  box.checked = askFirst.has(name);
  box.title = t("Ask before each call of {name}", { name });
  const caption = document.createElement("span");
  caption.textContent = text;
  label.append(box, caption);
  item.append(label);
  return item;
}
