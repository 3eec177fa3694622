// The colour theme: light, dark or the system's, saved in this browser. A classic script loaded
// from <head> (not a module: modules run after the first paint, which would flash the other
// palette); it also wires every <select data-theme-switch> on the page.
(() => {
  const KEY = "chat-shell.theme";
  const THEMES = ["system", "light", "dark"];

  function saved() {
    try {
      const theme = localStorage.getItem(KEY);
      return THEMES.includes(theme) ? theme : "system";
    } catch {
      return "system"; // storage refused (private mode): the system's theme
    }
  }

  // The palette follows `color-scheme` (app.css); the code-highlighting stylesheets are
  // chosen by their media queries, so a fixed theme pins them.
  function apply(theme) {
    document.documentElement.dataset.theme = theme;
    for (const link of document.querySelectorAll("link[data-code-theme]")) {
      const scheme = link.dataset.codeTheme;
      link.media = theme === "system" ? `(prefers-color-scheme: ${scheme})` : theme === scheme ? "all" : "not all";
    }
  }

  function choose(theme) {
    try {
      localStorage.setItem(KEY, theme);
    } catch {
      // not saved: this page still shows it
    }
    apply(theme);
    for (const select of document.querySelectorAll("select[data-theme-switch]")) select.value = theme;
  }

  apply(saved());
  document.addEventListener("DOMContentLoaded", () => {
    for (const select of document.querySelectorAll("select[data-theme-switch]")) {
      select.value = saved();
      select.addEventListener("change", () => choose(select.value));
    }
  });
  // Another tab switched: follow it.
  window.addEventListener("storage", (event) => {
    if (event.key === KEY) choose(saved());
  });
})();
