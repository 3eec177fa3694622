// A short notice at the bottom of the page, with an Undo button when the action can be taken
// back. It stays SHOWN_MS, counted again from the start once the pointer or focus leaves it, so
// nobody loses the chance while reaching for the button. One at a time: a new notice ends the
// one before it (that action stays done).

const SHOWN_MS = 6000;

export class UndoToast {
  constructor(element) {
    this.element = element;
    this.text = element.querySelector(".toast-text");
    this.button = element.querySelector(".toast-undo");
    this.timer = null;
    this.undo = null;
    this.held = { pointer: false, focus: false };
    this.button.addEventListener("click", () => {
      const undo = this.undo;
      this.hide();
      undo?.();
    });
    const hold = (reason, on) => {
      this.held[reason] = on;
      this.#arm();
    };
    element.addEventListener("pointerenter", () => hold("pointer", true));
    element.addEventListener("pointerleave", () => hold("pointer", false));
    element.addEventListener("focusin", () => hold("focus", true));
    element.addEventListener("focusout", () => hold("focus", false));
  }

  // `undo`: what the Undo button does; none: a notice without the button.
  show(text, undo = null) {
    this.hide();
    this.undo = undo;
    this.text.textContent = text;
    this.button.hidden = !undo;
    this.element.hidden = false;
    this.#arm();
  }

  hide() {
    clearTimeout(this.timer);
    this.timer = null;
    this.undo = null;
    this.held = { pointer: false, focus: false };
    this.element.hidden = true;
  }

  #arm() {
    clearTimeout(this.timer);
    if (this.element.hidden || this.held.pointer || this.held.focus) return;
    this.timer = setTimeout(() => this.hide(), SHOWN_MS);
  }
}
