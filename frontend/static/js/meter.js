// The context meter in the toolbar: used / available input (the window minus the reply's
// reserve: the one definition the panel, the dashboard and Prometheus share), remaining percent, a colour state, the
// per-source breakdown (hover, focus or click), and "Compacting context…" while a compaction
// runs. It is driven by `context.metrics` snapshots and `context.compaction` statuses; both
// `started` and `in_progress` mean compacting, so a page reloaded in the middle of a
// compaction shows it again from the replayed heartbeat.
import { formatInt, formatPercent, formatTokens, h } from "./format.js";
import { t } from "./i18n.js";

const SOURCES = [
  ["system", t("System prompt and instructions")],
  ["overhead", t("Provider's fixed overhead")],
  ["tool_schemas", t("Tool definitions")],
  ["history", t("Conversation history")],
  ["tool_outputs", t("Tool outputs")],
  ["attachments", t("Attachments")],
  ["summary", t("Summary of earlier turns")],
  ["current_input", t("Your new message")],
];
export const STATE_LABELS = {
  empty: t("No context used yet"),
  normal: t("Plenty of room"),
  warning: t("Nearing the compaction threshold"),
  compacting: t("Compacting context…"),
  compacted: t("Earlier messages were summarized"),
  refused: t("The message does not fit the model's context"),
};
// A compaction's status as the page says it (the meter here, the dashboard's history).
export const COMPACTION_STATUS = {
  started: t("started"),
  in_progress: t("in progress"),
  completed: t("completed"),
  fallback: t("fallback"),
};
const COMPACTING = new Set(["started", "in_progress"]);

// "2,101 of 14,976 input tokens; window 16,000": used of available input, and the window.
function usedOf(m) {
  return t("{used} of {available} input tokens; window {window}", {
    used: formatInt(m.used_input),
    available: formatInt(m.available_input),
    window: formatInt(m.context_window),
  });
}

export class ContextMeter {
  // onShowModel(): opens the model's view of the conversation (the button is hidden without one)
  constructor(root, onShowModel) {
    this.root = root;
    this.onShowModel = onShowModel;
    this.metrics = null;
    this.model = null; // the /api/models entry of the next turn's model, when known
    this.compaction = null; // the latest compaction status seen in this turn
    this.build();
    this.render();
  }

  build() {
    this.fill = h("span", { class: "meter-fill" });
    this.triggerMark = h("span", { class: "meter-trigger", title: t("Compaction threshold") });
    this.bar = h("span", { class: "meter-bar", role: "meter", "aria-label": t("Context used"), "aria-valuemin": 0 }, this.fill, this.triggerMark);
    this.usedLabel = h("span", { class: "meter-used" });
    this.leftLabel = h("span", { class: "meter-left" });
    // A narrow screen shows only the tokens, in short ("3.0k / 4.1k").
    this.shortLabel = h("span", { class: "meter-short" });
    this.label = h("span", { class: "meter-text" }, this.usedLabel, this.leftLabel, this.shortLabel);
    // The exact figures, for a screen reader: the button's name is its visible text (so a voice
    // command saying what is shown reaches it) followed by this.
    this.spokenLabel = h("span", { class: "visually-hidden" });
    this.spinner = h("span", { class: "meter-compacting", hidden: true }, h("span", { class: "spinner", "aria-hidden": "true" }), t("Compacting context…"));
    this.button = h(
      "button",
      { type: "button", class: "meter-button", "aria-expanded": "false", "aria-controls": "meter-details", "aria-describedby": "meter-details" },
      this.bar,
      this.label,
      " ",
      this.spokenLabel,
      this.spinner,
    );
    this.content = h("div", { class: "meter-content" });
    this.modelButton = h("button", { type: "button", class: "btn ghost tiny", text: t("What the model sees") });
    // The dialog gives the focus back to what held it when it opened: the meter's button, since
    // this one is hidden with the breakdown once the focus has moved into the dialog.
    this.modelButton.addEventListener("click", () => {
      this.button.focus();
      this.onShowModel();
    });
    this.details = h(
      "div",
      { class: "meter-details", id: "meter-details", role: "region", "aria-label": t("Context breakdown") },
      this.content,
      h("p", { class: "meter-actions" }, this.modelButton),
    );
    this.button.addEventListener("click", () => this.toggle());
    this.root.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.root.classList.contains("open")) {
        this.toggle(false);
        this.button.focus();
      }
    });
    // Closed once the focus is elsewhere: another control, or a dialog (the model view's too) opening over the page.
    document.addEventListener("focusin", (event) => {
      if (!this.root.contains(event.target)) this.toggle(false);
    });
    this.root.replaceChildren(this.button, this.details);
  }

  toggle(open = !this.root.classList.contains("open")) {
    this.root.classList.toggle("open", open);
    this.button.setAttribute("aria-expanded", String(open));
  }

  get compacting() {
    return COMPACTING.has(this.compaction?.status) || this.metrics?.state === "compacting";
  }

  get state() {
    if (this.compacting) return "compacting";
    return this.shown?.state ?? "empty";
  }

  // Which conversation the meter describes (null: none yet, so no model view to show).
  reset(conversationId = null) {
    this.modelButton.hidden = conversationId == null;
    this.metrics = null;
    this.compaction = null;
    this.render();
  }

  setMetrics(metrics) {
    if (!metrics) return;
    this.metrics = metrics;
    if (metrics.state !== "compacting" && metrics.phase === "final") this.compaction = null;
    this.render();
  }

  // The model of the next turn (a /api/models entry): a snapshot taken with another model is
  // shown against this one's window, input room and compaction threshold.
  setModel(info) {
    this.model = info;
    this.render();
  }

  // The latest snapshot, on the scale of the next turn's model.
  get shown() {
    const m = this.metrics;
    const info = this.model;
    if (!m || !info || m.profile === info.id) return m;
    const remaining = Math.max(0, info.available_input - m.used_input);
    const state = m.used_input > info.available_input ? "refused" : m.used_input >= info.warning_from ? "warning" : "normal";
    return {
      ...m,
      profile: info.id,
      context_window: info.context_window,
      reserved_output: info.context_window - info.available_input,
      available_input: info.available_input,
      trigger: info.trigger,
      remaining,
      remaining_percent: (remaining / Math.max(1, info.available_input)) * 100,
      state: m.state === "compacting" ? m.state : state,
    };
  }

  setCompaction(record) {
    this.compaction = record;
    this.render();
  }

  // A turn ended (completed, failed, stopped): no compaction can still be running.
  endTurn() {
    if (this.compacting) this.compaction = { ...this.compaction, status: "ended" };
    if (this.metrics?.state === "compacting") this.metrics = { ...this.metrics, state: "normal" };
    this.render();
  }

  render() {
    const m = this.shown;
    const state = this.state;
    this.root.dataset.state = state;
    this.spinner.hidden = !this.compacting;
    if (!m) {
      this.usedLabel.textContent = "";
      this.leftLabel.textContent = t("Context —");
      this.shortLabel.textContent = t("Context —");
      this.fill.style.width = "0%";
      this.triggerMark.hidden = true;
      this.bar.setAttribute("aria-valuenow", "0");
      this.bar.setAttribute("aria-valuetext", t("no context used yet"));
      this.spokenLabel.textContent = t("Context usage: none yet");
      this.content.replaceChildren(h("p", { class: "muted", text: t("The meter fills in once the model has been called in this conversation.") }));
      return;
    }
    const available = Math.max(1, m.available_input);
    const usedShare = Math.min(100, (m.used_input / available) * 100);
    const left = Math.max(0, Math.round(m.remaining_percent));
    this.fill.style.width = `${usedShare.toFixed(1)}%`;
    this.triggerMark.hidden = !m.trigger;
    this.triggerMark.dataset.trigger = String(m.trigger ?? "");
    this.triggerMark.style.left = `${Math.min(100, (m.trigger / available) * 100).toFixed(1)}%`;
    this.bar.setAttribute("aria-valuemax", String(m.available_input));
    this.bar.setAttribute("aria-valuenow", String(Math.min(m.used_input, m.available_input)));
    this.bar.setAttribute("aria-valuetext", t("{used} of {available} input tokens used", { used: formatInt(m.used_input), available: formatInt(m.available_input) }));
    this.usedLabel.textContent = t("{used} / {available} input · ", { used: formatTokens(m.used_input), available: formatTokens(m.available_input) });
    this.leftLabel.textContent = t("{percent} left", { percent: formatPercent(left) });
    this.shortLabel.textContent = t("{used} / {available}", { used: formatTokens(m.used_input), available: formatTokens(m.available_input) });
    this.spokenLabel.textContent = t("Context usage: {used}, {percent} left, {state}", { used: usedOf(m), percent: formatPercent(left), state: STATE_LABELS[state] });
    this.content.replaceChildren(...this.detailRows(m, state));
  }

  detailRows(m, state) {
    const total = Math.max(1, m.used_input);
    const rows = SOURCES.map(([key, label]) => {
      const tokens = m.breakdown?.[key] ?? 0;
      const bar = h("span", { class: `src-bar src-${key}` });
      bar.style.width = `${((tokens / total) * 100).toFixed(1)}%`;
      return h(
        "tr",
        { dataset: { source: key } },
        h("th", { scope: "row", text: label }),
        h("td", { class: "num", text: formatInt(tokens) }),
        h("td", { class: "src-cell" }, bar),
      );
    });
    const out = [
      h("p", { class: `meter-state state-${state}`, text: STATE_LABELS[state] }),
      h(
        "dl",
        { class: "meter-figures" },
        h("dt", { text: t("Model") }), h("dd", { class: "meter-model", text: this.model?.label ?? m.profile }),
        h("dt", { text: t("Used") }), h("dd", { class: "meter-used-of", text: usedOf(m) }),
        h("dt", { text: t("Kept for the reply") }), h("dd", { text: t("{tokens} tokens of the window", { tokens: formatInt(m.reserved_output) }) }),
        h("dt", { text: t("Left for input") }), h("dd", { text: t("{tokens} ({percent})", { tokens: formatInt(m.remaining), percent: formatPercent(Math.round(m.remaining_percent)) }) }),
        h("dt", { text: t("Compacts at") }), h("dd", { text: t("{tokens} tokens", { tokens: formatInt(m.trigger) }) }),
      ),
      h("table", { class: "meter-breakdown" }, h("caption", { class: "visually-hidden", text: t("Tokens by source") }), h("tbody", {}, rows)),
    ];
    const latest = this.compaction ?? m.latest_compaction;
    if (latest && latest.status !== "ended") {
      const status = COMPACTION_STATUS[latest.status] ?? latest.status;
      const text =
        latest.before_tokens != null && latest.after_tokens != null
          ? t("Latest compaction {status}: {before} → {after} tokens", { status, before: formatInt(latest.before_tokens), after: formatInt(latest.after_tokens) })
          : t("Latest compaction {status}", { status });
      out.push(h("p", { class: "muted small", text }));
    }
    return out;
  }
}
