// What the page says for an error code of the API (SPEC 6.1) or of a turn. The codes are
// stable and the server's messages are English: an English page shows the server's own words
// (they can be more precise), any other language the catalog's message for the code, and the
// server's words only for a code this table does not know.
import { language, t } from "./i18n.js";

const MESSAGES = {
  context_refused: () => t("Your message is too long for this model's context, even after summarizing the earlier ones; shorten it or split it up."),
  context_overflow: () => t("The conversation no longer fits the model's context."),
  local_model_starting: () => t("The local model is starting; send your message again in a moment."),
  local_model_failed: () => t("The local model failed to start; an operator can read its log."),
  runtime_unavailable: () => t("The model cannot be reached right now; try again in a moment."),
  too_many_running_turns: () => t("Replies are being written for you in other conversations, as many as allowed at once; wait for one to finish or stop one."),
  at_capacity: () => t("The service is writing as many replies as it can at once; yours is sent in a few seconds."),
  no_worker: () => t("No server is writing replies right now; yours is sent as soon as one is back."),
  worker_lost: () => t("The server writing this reply failed twice; try again."),
  too_many_streams: () => t("Too many tabs are following replies at once; close one or wait."),
  too_many_attempts: () => t("Too many attempts; wait a little and try again."),
  turn_running: () => t("A reply is still being written in this conversation; stop it or wait."),
  invalid_credentials: () => t("The username or password is wrong."),
  unauthorized: () => t("Your session ended; please log in again."),
  account_disabled: () => t("This account is disabled; ask an operator."),
  weak_password: () => t("Choose a longer password that is not easy to guess (at least 8 characters, not your username)."),
  invalid_username: () => t("Usernames have 3–64 characters: letters, digits, “_”, “.”, “-”."),
  username_taken: () => t("That username is taken; choose another."),
  invite_required: () => t("An invite code is needed to register here."),
  invalid_invite: () => t("That invite code is not valid."),
  invite_spent: () => t("That invite code has been used already."),
  registration_closed: () => t("Registration is closed; accounts are created by an operator."),
  upload_too_large: () => t("The file is larger than this server accepts."),
  empty_message: () => t("Write a message first."),
  csrf_failed: () => t("The page is out of date; reload it and try again."),
  network_error: () => t("The server cannot be reached; check your connection."),
  internal_error: () => t("Something went wrong on the server; try again."),
};

export function errorMessage(code, message) {
  const translated = language === "en" ? null : MESSAGES[code];
  return translated ? translated() : message;
}
