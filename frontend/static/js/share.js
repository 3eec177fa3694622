// A shared conversation (`/s/{token}`): the read-only snapshot the server put in the page, shown
// with the chat's own Markdown rendering; no account, no API calls.
import { AS_TYPED, renderMarkdown } from "./markdown.js";
import { formatBytes, formatTime, h } from "./format.js";
import { t } from "./i18n.js";

const SPEAKERS = { user: t("You"), assistant: t("Assistant") };
const shared = JSON.parse(document.getElementById("boot").textContent);

function messageElement(message) {
  const body = h("div", { class: "msg-body" });
  if (message.role === "assistant") renderMarkdown(body, message.text);
  else {
    body.classList.add("user-text", "md");
    renderMarkdown(body, message.text, AS_TYPED);
  }
  const head = h(
    "div",
    { class: "msg-head" },
    h("span", { class: "who", text: SPEAKERS[message.role] ?? message.role }),
    message.model ? h("span", { class: "msg-model muted small", text: message.model }) : null,
    h("time", { datetime: message.created_at, text: formatTime(message.created_at) }),
  );
  const tools = message.tools.length ? h("p", { class: "muted small share-tools", text: t("Used {tools}", { tools: message.tools.join(", ") }) }) : null;
  const files = message.attachments.length
    ? h("ul", { class: "chips", "aria-label": t("Attachments") }, message.attachments.map((file) => h("li", { class: "chip", text: t("{name} · {size}", { name: file.filename, size: formatBytes(file.size_bytes) }) })))
    : null;
  return h(
    "article",
    { class: `msg ${message.role}`, dataset: { role: message.role, status: message.status }, "aria-label": SPEAKERS[message.role] ?? message.role },
    head,
    tools,
    body,
    files,
  );
}

document.getElementById("share-note").textContent = t("A read-only copy shared from Chat Shell on {shared_at}.", { shared_at: formatTime(shared.shared_at) });
document.getElementById("share-messages").append(...shared.messages.map(messageElement));
