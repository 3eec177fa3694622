// A tool call inside a reply: its name, arguments and output, and for an "ask first" call the
// request with Allow / Deny (the page's message actions send the decision) or what was decided.
import { h } from "./format.js";
import { t } from "./i18n.js";

function toolArgsPreview(args) {
  const text = JSON.stringify(args ?? {});
  return text.length > 80 ? `${text.slice(0, 77)}…` : text;
}

const APPROVAL_TEXT = {
  allowed: t("You allowed this call."),
  denied: t("You denied this call; the model was told so."),
};
const APPROVAL_FLAG = { pending: t("waiting for you"), allowed: t("allowed by you"), denied: t("denied by you") };

// While the call waits: the request and its buttons; once decided, what was decided.
function approvalElement(block) {
  const element = h("div", { class: "tool-approval", dataset: { approval: block.approval } });
  if (block.approval === "pending") {
    element.append(
      h("p", { class: "tool-approval-ask", text: t("Run {name} with the arguments below? The reply waits for your decision.", { name: block.name }) }),
      h(
        "div",
        { class: "tool-approval-actions" },
        h("button", { type: "button", class: "btn primary", dataset: { action: "approve", callId: block.call_id }, text: t("Allow") }),
        h("button", { type: "button", class: "btn", dataset: { action: "deny", callId: block.call_id }, text: t("Deny") }),
      ),
    );
  } else {
    element.append(h("p", { class: "tool-approval-done muted small", text: APPROVAL_TEXT[block.approval] }));
  }
  return element;
}

export function setApproval(element, block) {
  element.dataset.approval = block.approval;
  const shown = approvalElement(block);
  if (element.approvalElement) element.approvalElement.replaceWith(shown);
  else element.querySelector(".tool-body").prepend(shown);
  element.approvalElement = shown;
  let flag = element.querySelector(".tool-approval-flag");
  if (!flag) {
    flag = h("span", { class: "tool-approval-flag" });
    element.querySelector(".tool-status").before(flag);
  }
  flag.textContent = APPROVAL_FLAG[block.approval];
  // A waiting request is shown open, so its buttons are in view.
  if (block.approval === "pending") element.open = true;
}

export function toolElement(block) {
  const status = block.status ?? "running";
  const output = h("pre", { class: "tool-output" });
  output.textContent = block.output ?? "";
  const element = h(
    "details",
    { class: "tool", dataset: { callId: block.call_id, status } },
    h(
      "summary",
      {},
      h("span", { class: "tool-label", text: t("Tool") }),
      h("span", { class: "tool-name", text: block.name }),
      h("code", { class: "tool-args-preview", text: toolArgsPreview(block.args) }),
      h("span", { class: "tool-status", text: status }),
      block.truncated_for_model ? h("span", { class: "tool-flag", title: t("The model saw a shortened copy of this output"), text: t("shortened for the model") }) : null,
    ),
    h(
      "div",
      { class: "tool-body" },
      h("p", { class: "tool-heading", text: t("Arguments") }),
      h("pre", { class: "tool-args", text: JSON.stringify(block.args ?? {}, null, 2) }),
      h("p", { class: "tool-heading", text: t("Output") }),
      output,
    ),
  );
  element.outputElement = output;
  if (block.approval) setApproval(element, block);
  return element;
}

export function updateTool(element, data) {
  const status = data.is_error ? "error" : "completed";
  element.dataset.status = status;
  element.querySelector(".tool-status").textContent = status;
  element.outputElement.textContent = data.output ?? "";
  if (data.truncated_for_model && !element.querySelector(".tool-flag")) {
    element.querySelector("summary").append(h("span", { class: "tool-flag", title: t("The model saw a shortened copy of this output"), text: t("shortened for the model") }));
  }
}
