// The model picker in the toolbar (GET /api/models): which model answers the next message of
// this conversation, or of the new chat about to be created. Changing it on an open
// conversation saves at once (PATCH), so the next turn runs with it; the meter rescales to the
// chosen model's window. Hidden when the server offers a single model.
import { api } from "./api.js";
import { h } from "./format.js";

export class ModelPicker {
  // onChange(info): the chosen model changed (info: the /api/models entry, or null);
  // onError(error): the choice could not be saved (the previous one is shown again)
  constructor(select, { onChange, onError }) {
    this.select = select;
    this.onChange = onChange;
    this.onError = onError;
    this.models = [];
    this.default = null;
    this.conversation = null;
    this.select.addEventListener("change", () => this.chosen());
  }

  async load() {
    const data = await api.get("/api/models");
    this.models = data.models;
    this.default = data.default;
    this.select.replaceChildren(...this.models.map((m) => h("option", { value: m.id, text: m.label })));
    this.select.hidden = this.models.length < 2;
    if (!this.select.disabled) this.show(this.conversation);
  }

  info(id = this.select.value) {
    return this.models.find((m) => m.id === id) ?? null;
  }

  // While a conversation loads: no choice, so none is made for the wrong conversation and then
  // overwritten by the one that arrives.
  wait() {
    this.conversation = null;
    this.select.disabled = true;
  }

  // The model a conversation runs with (none: the server's default).
  show(conversation) {
    this.conversation = conversation;
    this.select.disabled = false;
    this.select.value = conversation?.model_profile ?? this.default ?? "";
    this.onChange(this.info());
  }

  // What a new conversation is created with: null keeps the server's default.
  get forNewChat() {
    return this.select.value && this.select.value !== this.default ? this.select.value : null;
  }

  // Chooses a model as the user would (a preset's): saved on an open conversation.
  async choose(id) {
    if (!this.info(id) || this.select.value === id) return;
    this.select.value = id;
    await this.chosen();
  }

  async chosen() {
    const conversation = this.conversation;
    this.onChange(this.info());
    if (!conversation) return;
    const before = conversation.model_profile;
    try {
      const saved = await api.patch(`/api/conversations/${conversation.id}`, { model_profile: this.select.value });
      conversation.model_profile = saved.model_profile;
    } catch (error) {
      conversation.model_profile = before;
      this.show(conversation);
      this.onError(error);
    }
  }
}
