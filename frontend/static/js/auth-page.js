// Login and registration forms: JSON API calls, inline errors, then into the app.
import { ApiError, api } from "./api.js";

const form = document.getElementById("auth-form");
const errorBox = document.getElementById("auth-error");
const registering = form.dataset.mode === "register";

// Only same-site paths are followed after login (no open redirect).
function nextPath() {
  const next = new URLSearchParams(location.search).get("next") || "/";
  return next.startsWith("/") && !next.startsWith("//") ? next : "/";
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
  if (!username) return showError("Enter your username.", form.username);
  if (!password) return showError("Enter your password.", form.password);
  if (registering && password !== form.password_confirm.value) {
    return showError("The two passwords differ.", form.password_confirm);
  }
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    if (registering) await api.post("/api/auth/register", { username, password });
    await api.post("/api/auth/login", { username, password });
    location.assign(nextPath());
  } catch (error) {
    const message = error instanceof ApiError ? error.message : "Something went wrong; try again.";
    const field = error.code === "weak_password" ? form.password : error.code === "invalid_username" || error.code === "username_taken" ? form.username : null;
    showError(message.charAt(0).toUpperCase() + message.slice(1), field);
  } finally {
    button.disabled = false;
  }
});
