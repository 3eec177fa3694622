// A send the service cannot take yet (503 past its capacity, or no worker) is sent again after
// the Retry-After it was given, saying so, for about two minutes; nothing was stored meanwhile.
import { ApiError } from "./api.js";
import { t } from "./i18n.js";

const ADMISSION_CODES = new Set(["at_capacity", "no_worker"]);
const ADMISSION_ATTEMPTS = 40;

// `post()` makes the request; `say(text, kind)` shows the composer's status line.
export async function admitted(post, say) {
  for (let attempt = 1; ; attempt += 1) {
    try {
      const result = await post();
      if (attempt > 1) say("");
      return result;
    } catch (error) {
      if (!(error instanceof ApiError) || !ADMISSION_CODES.has(error.code) || attempt >= ADMISSION_ATTEMPTS) throw error;
      const seconds = error.retryAfter ?? 3;
      say(t("{message} Trying again in {seconds} s…", { message: error.message, seconds }), "warning");
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    }
  }
}
