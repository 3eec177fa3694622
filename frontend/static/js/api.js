// The JSON API client: CSRF header on state-changing requests, errors as ApiError {code, message}.
import { errorMessage } from "./errors.js";
import { t } from "./i18n.js";

// `message` is said in the page's language (errors.js); `code` stays as the server sent it.
// `retryAfter`: the seconds of the response's Retry-After (a 503 past the service's capacity).
export class ApiError extends Error {
  constructor(status, code, message, retryAfter = null) {
    super(errorMessage(code, message));
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

const CSRF_COOKIE = "chat_shell_csrf";

function csrfToken() {
  for (const part of document.cookie.split(";")) {
    const [name, ...value] = part.trim().split("=");
    if (name === CSRF_COOKIE) return decodeURIComponent(value.join("="));
  }
  return "";
}

function toLogin() {
  const next = encodeURIComponent(location.pathname);
  location.assign(`/login?next=${next}`);
}

async function request(method, path, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = csrfToken();
  const init = { method, headers, credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError(0, "network_error", t("The server cannot be reached; check your connection."));
  }
  if (response.status === 401 && !path.startsWith("/api/auth/")) {
    toLogin();
    throw new ApiError(401, "unauthorized", t("Your session ended; please log in again."));
  }
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const retryAfter = Number.parseInt(response.headers.get("retry-after") ?? "", 10);
    throw new ApiError(response.status, data?.code ?? "http_error", data?.message ?? response.statusText, Number.isFinite(retryAfter) ? retryAfter : null);
  }
  return data;
}

export const api = {
  get: (path) => request("GET", path),
  post: (path, body = {}) => request("POST", path, body),
  patch: (path, body) => request("PATCH", path, body),
  put: (path, body) => request("PUT", path, body),
  delete: (path) => request("DELETE", path),
};

// Uploads one file with progress (fetch has no upload progress; XMLHttpRequest does).
// Returns {promise, abort}; the promise resolves to the attachment or rejects with ApiError.
export function uploadFile(file, conversationId, onProgress) {
  const xhr = new XMLHttpRequest();
  const promise = new Promise((resolve, reject) => {
    const form = new FormData();
    form.append("file", file, file.name);
    if (conversationId != null) form.append("conversation_id", String(conversationId));
    xhr.open("POST", "/api/attachments");
    xhr.setRequestHeader("X-CSRF-Token", csrfToken());
    xhr.setRequestHeader("Accept", "application/json");
    xhr.responseType = "json";
    xhr.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) onProgress(event.loaded, event.total);
    });
    xhr.addEventListener("load", () => {
      const data = xhr.response;
      if (xhr.status >= 200 && xhr.status < 300) resolve(data);
      else reject(new ApiError(xhr.status, data?.code ?? "upload_failed", data?.message ?? t("the upload failed")));
    });
    xhr.addEventListener("error", () => reject(new ApiError(0, "network_error", t("the upload was interrupted"))));
    xhr.addEventListener("abort", () => reject(new ApiError(0, "aborted", t("the upload was cancelled"))));
    xhr.send(form);
  });
  return { promise, abort: () => xhr.abort() };
}

export async function logout() {
  await request("POST", "/api/auth/logout", {}).catch(() => null);
  location.assign("/login");
}
