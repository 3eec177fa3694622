// Login and registration forms: JSON API calls, inline errors, then into the app.
import { ApiError, api } from "./api.js";
import { t } from "./i18n.js";

const form = document.getElementById("auth-form");
const errorBox = document.getElementById("auth-error");
const registering = form.dataset.mode === "register";

// After login only a path of this origin is followed (no open redirect): it must start with
// one "/", hold no backslash (browsers read "/\evil.com" as "//evil.com") or control
// character, and still resolve to this origin.
function nextPath() {
  const next = new URLSearchParams(location.search).get("next");
  if (!next || !next.startsWith("/") || next.startsWith("//") || /[\\\u0000-\u001f\u007f]/.test(next)) {
    return "/";
  }
  const url = new URL(next, location.origin);
  return url.origin === location.origin ? url.pathname + url.search + url.hash : "/";
}

function showError(message, field) {
  errorBox.textContent = message;
  errorBox.hidden = false;
  if (field) {
    field.setAttribute("aria-invalid", "true");
    field.focus();
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  errorBox.hidden = true;
  for (const input of form.querySelectorAll("input")) input.removeAttribute("aria-invalid");
  const username = form.username.value.trim();
  const password = form.password.value;
  if (!username) return showError(t("Enter your username."), form.username);
  if (!password) return showError(t("Enter your password."), form.password);
  if (form.invite_code && !form.invite_code.value.trim()) {
    return showError(t("Enter your invite code."), form.invite_code);
  }
  if (registering && password !== form.password_confirm.value) {
    return showError(t("The two passwords differ."), form.password_confirm);
  }
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    if (registering) {
      const invite = form.invite_code ? { invite_code: form.invite_code.value.trim() } : {};
      await api.post("/api/auth/register", { username, password, ...invite });
    }
    await api.post("/api/auth/login", { username, password });
    location.assign(nextPath());
  } catch (error) {
    const message = error instanceof ApiError ? error.message : t("Something went wrong; try again.");
    const field = error.code === "weak_password" ? form.password : error.code === "invalid_username" || error.code === "username_taken" ? form.username : error.code === "invalid_invite" ? form.invite_code : null;
    showError(message.charAt(0).toUpperCase() + message.slice(1), field);
  } finally {
    button.disabled = false;
  }
});
