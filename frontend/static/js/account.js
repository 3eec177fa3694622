// The account page: the page's language, change the password, see and end browser sessions, make and revoke API
// tokens. Data: /api/auth/language, /api/auth/password, /api/auth/sessions, /api/auth/logout-others, /api/auth/tokens.

import { ApiError, api } from "./api.js";
import { formatTime, h } from "./format.js";
import { t, tn } from "./i18n.js";

const $ = (id) => document.getElementById(id);

function say(box, message) {
  box.textContent = message;
  box.hidden = !message;
}

function sentence(error) {
  const message = error instanceof ApiError ? error.message : t("Something went wrong; try again.");
  return message.charAt(0).toUpperCase() + message.slice(1);
}

// A short name for a User-Agent header: the browser and the system it runs on.
function browserName(agent) {
  if (!agent) return t("Unknown browser");
  const browser = /Edg\//.test(agent) ? "Edge" : /Firefox\//.test(agent) ? "Firefox" : /Chrom(e|ium)\//.test(agent) ? "Chrome" : /Safari\//.test(agent) ? "Safari" : null;
  const system = /Windows/.test(agent) ? "Windows" : /Android/.test(agent) ? "Android" : /iPhone|iPad/.test(agent) ? "iOS" : /Mac OS X/.test(agent) ? "macOS" : /Linux/.test(agent) ? "Linux" : null;
  if (!browser) return agent.slice(0, 60);
  return system ? t("{browser} on {system}", { browser, system }) : browser;
}

async function loadSessions() {
  const sessions = await api.get("/api/auth/sessions");
  $("sessions-table").tBodies[0].replaceChildren(
    ...sessions.map((session) => {
      const button = h("button", { type: "button", class: "btn tiny" }, t("Log out"));
      button.addEventListener("click", () => endSession(session, button));
      return h(
        "tr",
        { dataset: { sessionId: session.id, current: session.current } },
        h("td", { title: session.user_agent ?? "" }, browserName(session.user_agent), session.current ? h("span", { class: "badge operator" }, t("this session")) : null),
        h("td", {}, formatTime(session.created_at)),
        h("td", {}, formatTime(session.last_seen_at ?? session.created_at)),
        h("td", {}, formatTime(session.expires_at)),
        h("td", { class: "actions" }, button),
      );
    }),
  );
  $("logout-others").disabled = sessions.length < 2;
}

async function endSession(session, button) {
  button.disabled = true;
  try {
    await api.delete(`/api/auth/sessions/${session.id}`);
    if (session.current) {
      location.assign("/login");
      return;
    }
    say($("sessions-status"), t("That session is logged out."));
    await loadSessions();
  } catch (error) {
    say($("sessions-status"), sentence(error));
    button.disabled = false;
  }
}

$("logout-others").addEventListener("click", async () => {
  const button = $("logout-others");
  button.disabled = true;
  try {
    const { ended } = await api.post("/api/auth/logout-others");
    say($("sessions-status"), tn("{count} other session is logged out.", "{count} other sessions are logged out.", ended));
  } catch (error) {
    say($("sessions-status"), sentence(error));
  }
  await loadSessions();
});

$("password-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.currentTarget;
  say($("password-error"), "");
  say($("password-status"), "");
  for (const input of form.querySelectorAll("input")) input.removeAttribute("aria-invalid");
  const fail = (message, field) => {
    say($("password-error"), message);
    field.setAttribute("aria-invalid", "true");
    field.focus();
  };
  if (!form.current.value) return fail(t("Enter your current password."), form.current);
  if (!form.new.value) return fail(t("Enter a new password."), form.new);
  if (form.new.value !== form.repeat.value) return fail(t("The two new passwords differ."), form.repeat);
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    await api.post("/api/auth/password", { current_password: form.current.value, new_password: form.new.value });
    form.reset();
    say($("password-status"), t("Your password is changed; your other sessions are logged out."));
    await loadSessions();
  } catch (error) {
    fail(sentence(error), error.code === "invalid_credentials" ? form.current : form.new);
  } finally {
    button.disabled = false;
  }
});

const STATE_LABELS = { active: t("active"), expired: t("expired"), revoked: t("revoked") };

function tokenState(token) {
  if (token.revoked_at) return "revoked";
  if (token.expires_at && new Date(token.expires_at) <= new Date()) return "expired";
  return "active";
}

async function loadTokens() {
  const tokens = await api.get("/api/auth/tokens");
  $("tokens-empty").hidden = tokens.length > 0;
  $("tokens-table").hidden = tokens.length === 0;
  $("tokens-table").tBodies[0].replaceChildren(
    ...tokens.map((token) => {
      const state = tokenState(token);
      const revoke = state === "active" ? h("button", { type: "button", class: "btn tiny danger", "aria-label": t("Revoke {name}", { name: token.name }) }, t("Revoke")) : null;
      revoke?.addEventListener("click", async () => {
        revoke.disabled = true;
        try {
          await api.delete(`/api/auth/tokens/${token.id}`);
        } catch (error) {
          say($("token-error"), sentence(error));
        }
        await loadTokens();
      });
      return h(
        "tr",
        { dataset: { tokenId: token.id, state } },
        h("td", {}, token.name),
        h("td", {}, h("code", {}, `${token.prefix}…`)),
        h("td", {}, formatTime(token.created_at)),
        h("td", {}, token.expires_at ? formatTime(token.expires_at) : t("never")),
        h("td", {}, token.last_used_at ? formatTime(token.last_used_at) : t("never")),
        h("td", { class: "token-state" }, STATE_LABELS[state]),
        h("td", { class: "actions" }, revoke),
      );
    }),
  );
}

$("token-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.currentTarget;
  say($("token-error"), "");
  const name = form.name.value.trim();
  if (!name) {
    say($("token-error"), t("Give the token a name."));
    form.name.focus();
    return;
  }
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const created = await api.post("/api/auth/tokens", { name, expires_in_days: Number(form.expiry.value) });
    $("new-token-value").textContent = created.token;
    $("new-token").hidden = false;
    form.name.value = "";
    await loadTokens();
  } catch (error) {
    say($("token-error"), sentence(error));
  } finally {
    button.disabled = false;
  }
});

// The language is the account's: stored, then the page is loaded again in it (no logout).
$("language").addEventListener("change", async (event) => {
  const select = event.currentTarget;
  say($("language-error"), "");
  select.disabled = true;
  try {
    await api.put("/api/auth/language", { language: select.value || null });
    location.reload();
  } catch (error) {
    say($("language-error"), sentence(error));
    select.disabled = false;
  }
});

async function start() {
  try {
    await Promise.all([loadSessions(), loadTokens()]);
  } catch (error) {
    say($("sessions-status"), sentence(error));
  }
  $("account").dataset.loaded = "true";
  $("account").removeAttribute("aria-busy");
}

start();
