// The operators' users page: accounts (create, disable/enable, reset a password, make or revoke
// operator), invite codes when registration is by invitation, and the audit log of all of it.
// Data: /api/admin/users, /api/admin/audit, /api/auth/invites.

import { ApiError, api } from "./api.js";
import { formatTime, h } from "./format.js";

const $ = (id) => document.getElementById(id);
const boot = JSON.parse($("boot").textContent);
const me = boot.user.id;

const ACTIONS = {
  "user.create": "created the account",
  "user.disable": "disabled the account",
  "user.enable": "enabled the account",
  "user.password_reset": "reset the password",
  "user.operator_grant": "made operator",
  "user.operator_revoke": "revoked operator",
  "invite.create": "created an invite code",
  "invite.revoke": "revoked an invite code",
};

function sentence(error) {
  const message = error instanceof ApiError ? error.message : "Something went wrong; try again.";
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

function actionButton(label, name, handler, danger = false) {
  const button = h("button", { type: "button", class: `btn tiny${danger ? " danger" : ""}`, "aria-label": `${label} ${name}` }, label);
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
  $("reset-label").textContent = `New password for ${user.username}`;
  $("reset-form").hidden = false;
  $("reset-password").value = "";
  $("reset-password").focus();
}

function userRow(user) {
  const path = `/api/admin/users/${user.id}`;
  const disabled = user.disabled_at != null;
  // No "Disable" on your own row: the server refuses it (`cannot_disable_self`).
  const actions = [
    disabled
      ? actionButton("Enable", user.username, (b) => act(b, () => api.post(`${path}/enable`), `${user.username} can log in again.`))
      : user.id === me
        ? null
        : actionButton("Disable", user.username, (b) => act(b, () => api.post(`${path}/disable`), `${user.username} is disabled; their sessions and tokens stopped.`), true),
    actionButton("Reset password", user.username, () => openReset(user)),
    user.is_operator
      ? actionButton("Revoke operator", user.username, (b) => act(b, () => api.delete(`${path}/operator`).then(leaveIfMe(user)), `${user.username} is no longer an operator.`))
      : actionButton("Make operator", user.username, (b) => act(b, () => api.put(`${path}/operator`), `${user.username} is now an operator.`)),
  ];
  return h(
    "tr",
    { dataset: { userId: user.id, disabled, operator: user.is_operator } },
    h(
      "td",
      { class: "username" },
      user.username,
      user.id === me ? h("span", { class: "badge" }, "you") : null,
      user.is_operator ? h("span", { class: "badge operator" }, "operator") : null,
      disabled ? h("span", { class: "badge disabled" }, "disabled") : null,
    ),
    h("td", {}, formatTime(user.created_at)),
    h("td", {}, user.last_seen_at ? formatTime(user.last_seen_at) : "—"),
    h("td", { class: "actions" }, actions),
  );
}

function inviteRow(invite) {
  const spent = invite.used_at != null;
  const expired = !spent && new Date(invite.expires_at) <= new Date();
  const revoke = spent ? null : actionButton("Revoke", `invite #${invite.id}`, (b) => act(b, () => api.delete(`/api/auth/invites/${invite.id}`), `Invite #${invite.id} is revoked.`), true);
  return h(
    "tr",
    { dataset: { inviteId: invite.id } },
    h("td", {}, `#${invite.id}`),
    h("td", {}, formatTime(invite.created_at)),
    h("td", {}, formatTime(invite.expires_at), expired ? h("span", { class: "badge disabled" }, "expired") : null),
    h("td", {}, spent ? `${invite.used_by ?? "a deleted account"} (${formatTime(invite.used_at)})` : "unused"),
    h("td", { class: "actions" }, revoke),
  );
}

function auditRow(event) {
  return h(
    "tr",
    { dataset: { action: event.action } },
    h("td", {}, formatTime(event.created_at)),
    h("td", {}, event.actor_name ?? "command line"),
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
    report("Enter a username and a password.", true);
    (username ? form.password : form.username).focus();
    return;
  }
  const body = { username, password: form.password.value, is_operator: form.operator.checked };
  await act(form.querySelector("button[type=submit]"), () => api.post("/api/admin/users", body), (user) => {
    form.reset();
    return `${user.username} can log in now.`;
  });
  form.querySelector("button[type=submit]").disabled = false;
});

$("reset-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const user = resetting;
  const password = $("reset-password").value;
  if (!user || !password) return;
  const button = event.currentTarget.querySelector("button[type=submit]");
  await act(button, () => api.post(`/api/admin/users/${user.id}/password`, { password }), `${user.username}'s password is reset; their sessions are logged out.`);
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
    return "Invite code created.";
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
