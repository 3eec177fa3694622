// A conversation named by its first line gets a generated title after a completed reply,
// written in the background: the page re-reads the conversation until the title has come
// (usually within a few seconds; it stops asking after about a minute).
import { api } from "./api.js";

const TITLE_CHECKS_MS = [500, 1000, 2000, 4000, 8000, 16000, 32000];
const awaitingTitles = new Set();

// `onTitle(conversation)` gets the conversation once its generated title is in.
export async function awaitTitle(id, onTitle) {
  if (awaitingTitles.has(id)) return;
  awaitingTitles.add(id);
  try {
    for (const delay of TITLE_CHECKS_MS) {
      await new Promise((resolve) => setTimeout(resolve, delay));
      const conversation = await api.get(`/api/conversations/${id}`);
      if (conversation.title_source === "fallback") continue;
      onTitle(conversation);
      return;
    }
  } catch {
    // Deleted or unreachable meanwhile: the sidebar shows what it had.
  } finally {
    awaitingTitles.delete(id);
  }
}
