// An attachment as a message shows it: thumbnail or type icon, name (a download link while the
// file is kept), size and state.
import { fileIcon, formatBytes, h } from "./format.js";
import { t } from "./i18n.js";

const ATTACHMENT_STATES = { deleted: t("deleted"), ready: t("ready"), failed: t("failed"), uploading: t("uploading") };

export function attachmentChip(attachment) {
  const state = attachment.deleted ? "deleted" : attachment.status;
  return h(
    "li",
    { class: `chip chip-${state}`, dataset: { attachmentId: attachment.id } },
    // An image shows itself (a small thumbnail of the stored file); other files their type.
    attachment.mime_type?.startsWith("image/") && !attachment.deleted
      ? h("img", { class: "chip-thumb", src: `/api/attachments/${attachment.id}/download`, alt: "", loading: "lazy" })
      : fileIcon(attachment.mime_type, attachment.filename),
    attachment.deleted
      ? h("span", { class: "chip-name", text: attachment.filename })
      : h("a", { class: "chip-name", href: `/api/attachments/${attachment.id}/download`, text: attachment.filename, download: attachment.filename }),
    h("span", { class: "chip-meta", text: t("{size} · {state}", { size: formatBytes(attachment.size_bytes), state: ATTACHMENT_STATES[state] ?? state }) }),
  );
}
