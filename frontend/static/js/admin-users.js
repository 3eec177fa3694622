// The operators' users page: accounts (create, disable/enable, reset a password, make or revoke
// operator), invite codes when registration is by invitation, and the audit log of all of it.
// Data: /api/admin/users, /api/admin/audit, /api/auth/invites.

import { ApiError, api } from "./api.js";
import { formatTime, h } from "./format.js";
import { t } from "./i18n.js";

const $ = (id) => document.getElementById(id);
const boot = JSON.parse($("boot").textContent);
const me = boot.user.id;

const ACTIONS = {
  "user.create": t("created the account"),
  "user.disable": t("disabled the account"),
  "user.enable": t("enabled the account"),
  "user.password_reset": t("reset the password"),
  "user.operator_grant": t("made operator"),
  "user.operator_revoke": t("revoked operator"),
  "invite.create": t("created an invite code"),
  "invite.revoke": t("revoked an invite code"),
};

function sentence(error) {
  const message = error instanceof ApiError ? error.message : t("Something went wrong; try again.");
  return message.charAt(0).toUpperCase() + message.slice(1);
}

function report(message, failed = false) {
  $("admin-error").textContent = failed ? message : "";
  $("admin-error").hidden = !failed;
  $("admin-status").textContent = failed ? "" : message;
  $("admin-status").hidden = failed || !message;
}

// Runs one action, says how it went, then shows the new state of every table.
async function act(button, call, done) {
  button.disabled = true;
  try {
    const result = await call();
    report(typeof done === "function" ? done(result) : done);
  } catch (error) {
    report(sentence(error), true);
  }
  await refresh();
}

// label: the button's word; name: what the button says to a screen reader ("Enable alice")
function actionButton(label, name, handler, danger = false) {
  const button = h("button", { type: "button", class: `btn tiny${danger ? " danger" : ""}`, "aria-label": name }, label);
  button.addEventListener("click", () => handler(button));
  return button;
}

// An operator who gave up the role has nothing more to do here.
const leaveIfMe = (user) => (result) => {
  if (user.id === me) location.assign("/");
  return result;
};

let resetting = null;

function openReset(user) {
  resetting = user;
  $("reset-label").textContent = t("New password for {username}", { username: user.username });
  $("reset-form").hidden = false;
  $("reset-password").value = "";
  $("reset-password").focus();
}

function userRow(user) {
  const path = `/api/admin/users/${user.id}`;
  const disabled = user.disabled_at != null;
  // No "Disable" on your own row: the server refuses it (`cannot_disable_self`).
  const name = { name: user.username };
  const actions = [
    disabled
      ? actionButton(t("Enable"), t("Enable {name}", name), (b) => act(b, () => api.post(`${path}/enable`), t("{name} can log in again.", name)))
      : user.id === me
        ? null
        : actionButton(t("Disable"), t("Disable {name}", name), (b) => act(b, () => api.post(`${path}/disable`), t("{name} is disabled; their sessions and tokens stopped.", name)), true),
    actionButton(t("Reset password"), t("Reset password {name}", name), () => openReset(user)),
    user.is_operator
      ? actionButton(t("Revoke operator"), t("Revoke operator {name}", name), (b) => act(b, () => api.delete(`${path}/operator`).then(leaveIfMe(user)), t("{name} is no longer an operator.", name)))
      : actionButton(t("Make operator"), t("Make operator {name}", name), (b) => act(b, () => api.put(`${path}/operator`), t("{name} is now an operator.", name))),
  ];
  return h(
    "tr",
    { dataset: { userId: user.id, disabled, operator: user.is_operator } },
    h(
      "td",
      { class: "username" },
      user.username,
      user.id === me ? h("span", { class: "badge" }, t("you")) : null,
      user.is_operator ? h("span", { class: "badge operator" }, t("operator")) : null,
      disabled ? h("span", { class: "badge disabled" }, t("disabled")) : null,
    ),
    h("td", {}, formatTime(user.created_at)),
    h("td", {}, user.last_seen_at ? formatTime(user.last_seen_at) : "—"),
    h("td", { class: "actions" }, actions),
  );
}

function inviteRow(invite) {
  const spent = invite.used_at != null;
  const expired = !spent && new Date(invite.expires_at) <= new Date();
  const revoke = spent ? null : actionButton(t("Revoke"), t("Revoke invite #{id}", { id: invite.id }), (b) => act(b, () => api.delete(`/api/auth/invites/${invite.id}`), t("Invite #{id} is revoked.", { id: invite.id })), true);
  return h(
    "tr",
    { dataset: { inviteId: invite.id } },
    h("td", {}, `#${invite.id}`),
    h("td", {}, formatTime(invite.created_at)),
    h("td", {}, formatTime(invite.expires_at), expired ? h("span", { class: "badge disabled" }, t("expired")) : null),
    h("td", {}, spent ? t("{name} ({when})", { name: invite.used_by ?? t("a deleted account"), when: formatTime(invite.used_at) }) : t("unused")),
    h("td", { class: "actions" }, revoke),
  );
}

function auditRow(event) {
  return h(
    "tr",
    { dataset: { action: event.action } },
    h("td", {}, formatTime(event.created_at)),
    h("td", {}, event.actor_name ?? t("command line")),
    h("td", { title: event.action }, ACTIONS[event.action] ?? event.action),
    h("td", {}, event.target_name ?? "—"),
    h("td", { class: "muted" }, event.detail ?? ""),
  );
}

async function refresh() {
  const invites = $("invites-table") ? api.get("/api/auth/invites") : Promise.resolve(null);
  const [users, audit, codes] = await Promise.all([api.get("/api/admin/users"), api.get("/api/admin/audit"), invites]);
  $("users-table").tBodies[0].replaceChildren(...users.map(userRow));
  $("audit-table").tBodies[0].replaceChildren(...audit.map(auditRow));
  if (codes) $("invites-table").tBodies[0].replaceChildren(...codes.map(inviteRow));
}

$("create-user-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.currentTarget;
  const username = form.username.value.trim();
  if (!username || !form.password.value) {
    report(t("Enter a username and a password."), true);
    (username ? form.password : form.username).focus();
    return;
  }
  const body = { username, password: form.password.value, is_operator: form.operator.checked };
  await act(form.querySelector("button[type=submit]"), () => api.post("/api/admin/users", body), (user) => {
    form.reset();
    return t("{username} can log in now.", { username: user.username });
  });
  form.querySelector("button[type=submit]").disabled = false;
});

$("reset-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const user = resetting;
  const password = $("reset-password").value;
  if (!user || !password) return;
  const button = event.currentTarget.querySelector("button[type=submit]");
  await act(button, () => api.post(`/api/admin/users/${user.id}/password`, { password }), t("{name}'s password is reset; their sessions are logged out.", { name: user.username }));
  button.disabled = false;
  if (!$("admin-error").hidden) return;
  $("reset-form").hidden = true;
  resetting = null;
});

$("reset-cancel").addEventListener("click", () => {
  $("reset-form").hidden = true;
  resetting = null;
});

$("invite-form")?.addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.currentTarget;
  const button = form.querySelector("button[type=submit]");
  await act(button, () => api.post("/api/auth/invites", { days: Number(form.days.value) || null }), (invite) => {
    $("new-invite-value").textContent = invite.code;
    $("new-invite").hidden = false;
    return t("Invite code created.");
  });
  button.disabled = false;
});

async function start() {
  try {
    await refresh();
  } catch (error) {
    report(sentence(error), true);
  }
  $("users-admin").dataset.loaded = "true";
  $("users-admin").removeAttribute("aria-busy");
}

start();
