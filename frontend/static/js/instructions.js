// "Instructions": this chat's own system prompt (after the operator's, which users never see),
// editable at any time, and presets (name, instructions, model) to start chats from. Before
// the first message of a new chat the text is kept here and sent with the new conversation.
import { api } from "./api.js";
import { h } from "./format.js";
import { t } from "./i18n.js";

export class Instructions {
  // host: { conversation(): the open conversation or null, picker: the ModelPicker,
  //         say(text, kind): a status line }
  constructor(button, host) {
    this.button = button;
    this.host = host;
    this.pending = ""; // a new chat's instructions, until it is created
    this.presets = [];
    this.build();
    button.addEventListener("click", () => this.open());
  }

  build() {
    this.text = h("textarea", { id: "instructions-text", rows: 8, maxlength: 100000, placeholder: t("e.g. Answer briefly, in French.") });
    this.presetSelect = h("select", { id: "preset-select" });
    this.presetName = h("input", { id: "preset-name", type: "text", maxlength: 100, autocomplete: "off" });
    this.status = h("p", { class: "muted small", role: "status", "aria-live": "polite" });
    const save = h("button", { type: "submit", class: "btn primary", text: t("Save") });
    const close = h("button", { type: "button", class: "btn ghost", text: t("Close") });
    const apply = h("button", { type: "button", class: "btn ghost", text: t("Use preset") });
    const savePreset = h("button", { type: "button", class: "btn ghost", text: t("Save as preset") });
    this.form = h(
      "form",
      { method: "dialog", class: "instructions-form" },
      h("label", { for: "instructions-text", text: t("Instructions for this chat") }),
      this.text,
      h("p", { class: "muted small", text: t("Sent to the model before the conversation, on every turn; counted as system in the context meter.") }),
      h("p", { class: "form-row" }, save, close),
      h("fieldset", {}, h("legend", { text: t("Presets") }),
        h("p", { class: "form-row" }, h("label", { for: "preset-select", text: t("Preset") }), this.presetSelect, apply),
        h("p", { class: "form-row" }, h("label", { for: "preset-name", text: t("Preset name") }), this.presetName, savePreset)),
      this.status,
    );
    this.dialog = h(
      "dialog",
      { class: "model-view instructions-dialog", "aria-labelledby": "instructions-title" },
      h("div", { class: "model-view-head" }, h("h2", { id: "instructions-title", text: t("Instructions") })),
      this.form,
    );
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.save();
    });
    close.addEventListener("click", () => this.dialog.close());
    apply.addEventListener("click", () => this.usePreset());
    savePreset.addEventListener("click", () => this.savePreset());
    document.body.append(this.dialog);
  }

  // The open conversation changed (null: a new chat).
  show(conversation) {
    this.button.classList.toggle("is-set", Boolean(conversation ? conversation.instructions : this.pending));
  }

  // A new chat starts without instructions.
  newChat() {
    this.pending = "";
    this.show(null);
  }

  async open() {
    const conversation = this.host.conversation();
    this.text.value = conversation ? conversation.instructions ?? "" : this.pending;
    this.status.textContent = "";
    this.dialog.showModal();
    this.text.focus();
    await this.loadPresets();
  }

  async loadPresets() {
    try {
      this.presets = await api.get("/api/presets");
    } catch (error) {
      this.status.textContent = t("Presets could not be loaded: {message}", { message: error.message });
      return;
    }
    const chosen = this.presetSelect.value; // a choice made while the list was reloading stays
    const options = this.presets.map((p) => h("option", { value: String(p.id), text: p.name }));
    this.presetSelect.replaceChildren(h("option", { value: "", text: t("Choose a preset…") }), ...options);
    if (this.presets.some((p) => String(p.id) === chosen)) this.presetSelect.value = chosen;
  }

  async save() {
    const conversation = this.host.conversation();
    const text = this.text.value;
    if (!conversation) {
      this.pending = text;
      this.show(null);
      this.status.textContent = t("Saved; they apply from the first message of this chat.");
      return;
    }
    try {
      const saved = await api.patch(`/api/conversations/${conversation.id}`, { instructions: text });
      conversation.instructions = saved.instructions;
      this.show(conversation);
      this.status.textContent = t("Saved; the next reply follows them.");
    } catch (error) {
      this.status.textContent = t("The instructions could not be saved: {message}", { message: error.message });
    }
  }

  // Fills in a preset's instructions and chooses its model; Save keeps them.
  async usePreset() {
    const preset = this.presets.find((p) => String(p.id) === this.presetSelect.value);
    if (!preset) return;
    this.text.value = preset.instructions;
    if (preset.model_profile) await this.host.picker.choose(preset.model_profile);
    await this.save();
  }

  async savePreset() {
    const name = this.presetName.value.trim();
    if (!name) {
      this.status.textContent = t("Give the preset a name.");
      this.presetName.focus();
      return;
    }
    try {
      await api.post("/api/presets", { name, instructions: this.text.value, model_profile: this.host.picker.select.value || null });
      this.presetName.value = "";
      this.status.textContent = t("Saved the preset \"{name}\".", { name });
      await this.loadPresets();
    } catch (error) {
      this.status.textContent = t("The preset could not be saved: {message}", { message: error.message });
    }
  }
}
