// The line a compaction draws in the transcript: what was summarized or trimmed, its token
// figures, and the summary the model now sees instead of the messages above it.
import { formatInt, h } from "./format.js";
import { t } from "./i18n.js";

export function boundaryElement(record, assistantMessageId) {
  const strategy = record.strategy ?? "summary_compact";
  const summarized = strategy === "summary_compact" || strategy === "summary_ahead";
  const figures = record.before_tokens != null && record.after_tokens != null ? t(" ({before_tokens} → {after_tokens} tokens)", { before_tokens: formatInt(record.before_tokens), after_tokens: formatInt(record.after_tokens) }) : "";
  // A summary made ahead of time (between turns) is labelled as such.
  const label =
    strategy === "summary_ahead"
      ? t("Earlier messages summarized ahead of time")
      : summarized
        ? t("Earlier messages summarized")
        : t("Earlier messages trimmed from the model's context");
  const body = h("div", { class: "boundary-body" });
  if (record.summary_text) {
    body.append(h("p", { class: "muted small", text: t("What the model now sees instead of the messages above this line (they stay here for you); the messages below it reach the model verbatim:") }));
    body.append(h("div", { class: "summary-text", text: record.summary_text }));
  } else {
    body.append(h("p", { class: "muted small", text: t("The messages above stay here for you; the model sees a shorter context from this point on.") }));
  }
  return h(
    "section",
    { class: "boundary", "aria-label": label, dataset: { forMessage: assistantMessageId } },
    h("details", {}, h("summary", {}, h("span", { class: "boundary-label", text: label }), h("span", { class: "boundary-figures", text: figures })), body),
  );
}
