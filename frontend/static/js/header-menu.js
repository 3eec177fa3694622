// On a narrow screen the conversation's header actions (model, Instructions, Tools, Share,
// Export) fold into one menu button, so the header keeps one row and the title its room; a wide
// screen shows them in the header and never shows the button (app.css decides which).
// The button opens the panel with the focus on its first action; ArrowDown / ArrowUp move between
// the actions, Escape (or a click elsewhere) closes it with the focus back on the button. Choosing
// an action closes it too, the focus on the button first, so a dialog the action opens gives the
// focus back to the button when it closes.

const ACTIONS = ":scope > button:not([hidden]), :scope > select:not([hidden]), :scope > details:not([hidden]) > summary";

export class HeaderMenu {
  constructor(button, panel) {
    this.button = button;
    this.panel = panel;
    button.addEventListener("click", () => {
      this.toggle(!this.isOpen);
      if (this.isOpen) this.actions[0]?.focus();
    });
    // Capturing: closed before the action's own handler runs (and opens its dialog, say).
    panel.addEventListener(
      "click",
      (event) => {
        const action = event.target.closest("button, a");
        if (this.isOpen && action && (action.parentElement === panel || action.matches(".menu-items a"))) this.close();
      },
      true,
    );
    panel.addEventListener("keydown", (event) => this.#move(event));
    document.addEventListener("keydown", (event) => {
      // An Escape a menu inside the panel (Export's) has taken closes only that one.
      if (event.key !== "Escape" || !this.isOpen || event.defaultPrevented) return;
      if (panel.contains(event.target) || event.target === button) this.close();
    });
    document.addEventListener("click", (event) => {
      if (this.isOpen && !panel.contains(event.target) && !button.contains(event.target)) this.toggle(false);
    });
  }

  get isOpen() {
    return this.panel.classList.contains("open");
  }

  get actions() {
    return [...this.panel.querySelectorAll(ACTIONS)];
  }

  toggle(open) {
    this.panel.classList.toggle("open", open);
    this.button.setAttribute("aria-expanded", String(open));
  }

  close() {
    this.toggle(false);
    this.button.focus();
  }

  #move(event) {
    if (!this.isOpen || (event.key !== "ArrowDown" && event.key !== "ArrowUp")) return;
    const actions = this.actions;
    const index = actions.indexOf(event.target);
    if (index < 0 || event.target.tagName === "SELECT") return; // its arrows pick a model
    event.preventDefault();
    const step = event.key === "ArrowDown" ? 1 : -1;
    actions[(index + step + actions.length) % actions.length].focus();
  }
}
