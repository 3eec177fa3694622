// The chat page: routing between conversations, sending, and following the running turn over
// the resumable stream into the transcript and the context meter. The frame (drawer, menus), the
// message buttons and the retry of a refused send are modules of their own.
import { admitted } from "./admission.js";
import { ApiError, api, logout } from "./api.js";
import { closeSidebar, setUpLayout } from "./chat-layout.js";
import { Composer } from "./composer.js";
import { titleFrom } from "./format.js";
import { instrumentation, markFirstPage, recordEvent } from "./instrumentation.js";
import { Instructions } from "./instructions.js";
import { LocalModelNotice } from "./local-model.js";
import { MessageActions } from "./message-actions.js";
import { MessageSearch } from "./message-search.js";
import { ContextMeter } from "./meter.js";
import { ModelPicker } from "./model-picker.js";
import { ModelView } from "./model-view.js";
import { ShareDialog } from "./share-dialog.js";
import { Sidebar } from "./sidebar.js";
import { UndoToast } from "./undo-toast.js";
import { TurnStream } from "./stream.js";
import { ToolsPanel } from "./tools-panel.js";
import { Transcript } from "./transcript.js";
import { awaitTitle } from "./title-watch.js";
import { t } from "./i18n.js";

const PAGE = 40;
const $ = (id) => document.getElementById(id);
const boot = JSON.parse($("boot").textContent);

const state = {
  conversation: null,
  stream: null,
  streamingView: null,
  opening: 0, // increments per open(), so a slow response for an old conversation is dropped
  opened: Promise.resolve(), // the latest open(): a send made while it loads waits for it
};

const meter = new ContextMeter($("context-meter"), () => {
  if (state.conversation) new ModelView(state.conversation.id).show();
});
const picker = new ModelPicker($("model-picker"), {
  onChange: (info) => meter.setModel(info),
  onError: (error) => composer.say(t("The model could not be changed: {message}", { message: error.message }), "error"),
});
const transcript = new Transcript({
  scroller: $("transcript"),
  list: $("messages"),
  topSentinel: $("transcript-top"),
  bottomSentinel: $("transcript-bottom"),
  olderStatus: $("older-status"),
  emptyState: $("empty-state"),
  modelLabel: (id) => picker.info(id)?.label ?? id,
});
const sidebar = new Sidebar(
  {
    list: $("conversation-list"),
    scroller: $("conversation-scroller"),
    sentinel: $("conversation-more"),
    empty: $("conversation-empty"),
    search: $("conversation-search"),
    archivedToggle: $("archived-toggle"),
  },
  new UndoToast($("toast")),
  {
    open: (id) => navigate(id),
    deleted: (id) => {
      if (state.conversation?.id === id) navigate(null);
    },
    renamed: (conversation) => retitle(conversation),
  },
);
const composer = new Composer(
  {
    form: $("composer"),
    input: $("message-input"),
    send: $("send"),
    stop: $("stop"),
    attach: $("attach"),
    fileInput: $("file-input"),
    chips: $("pending-attachments"),
    status: $("composer-status"),
    dropZone: $("chat"),
    overlay: $("drop-overlay"),
  },
  {
    conversationId: () => state.conversation?.id ?? null,
    acceptsImages: () => picker.info()?.accepts_images ?? false,
    send: (text, attachments) => send(text, attachments),
    stop: () => api.post(`/api/conversations/${state.conversation.id}/stop`),
  },
);

const toolsPanel = new ToolsPanel($("tools-menu"), $("tools-list"), $("tools-status"));
new MessageSearch(
  { input: $("conversation-search"), region: $("message-results"), list: $("message-hits"), status: $("message-search-status") },
  async (conversationId, messageId) => {
    await navigate(conversationId);
    if (state.conversation?.id !== conversationId) return;
    if (await transcript.reveal(messageId)) return;
    // Not on the path shown: another version holds it, so that version is shown.
    const shown = await api.post(`/api/conversations/${conversationId}/versions`, { message_id: messageId }).then(
      () => true,
      () => false,
    );
    if (shown && state.conversation?.id === conversationId) {
      await open(conversationId);
      if (await transcript.reveal(messageId)) return;
    }
    composer.say(t("That message is no longer in this conversation."), "warning");
  },
);
const instructions = new Instructions($("instructions-button"), {
  conversation: () => state.conversation,
  picker,
});

const localModel = new LocalModelNotice($("local-model-status"), composer, boot.local_model);
const isLocalModelError = (code) => typeof code === "string" && code.startsWith("local_model_");

const say = (text, kind) => composer.say(text, kind);

function announce(text) {
  $("announcer").textContent = text;
}

// The open conversation's title (and where it came from), as the server now has it.
function retitle(conversation) {
  if (state.conversation?.id !== conversation.id) return;
  state.conversation = { ...state.conversation, title: conversation.title, title_source: conversation.title_source };
  showTitle(state.conversation);
}

function showTitle(conversation) {
  const title = conversation?.title ?? t("New conversation");
  $("conversation-title").textContent = title;
  document.title = t("{title} · Chat Shell", { title });
  const exportable = Boolean(conversation);
  $("export-menu").hidden = !exportable;
  $("share-button").hidden = !exportable;
  if (conversation?.id !== toolsPanel.conversationId) toolsPanel.show(conversation?.id ?? null);
  if (exportable) {
    $("export-md").href = `/api/conversations/${conversation.id}/export?format=md`;
    $("export-json").href = `/api/conversations/${conversation.id}/export?format=json`;
  }
}

// -- opening conversations ---------------------------------------------------------------

function closeStream() {
  state.stream?.close();
  state.stream = null;
  state.streamingView = null;
  instrumentation.stream = null;
}

async function navigate(id, { replace = false } = {}) {
  const path = id == null ? "/" : `/c/${id}`;
  if (location.pathname !== path) history[replace ? "replaceState" : "pushState"]({ id }, "", path);
  closeSidebar();
  await open(id);
}

// Opening a conversation; a send waits for it, so a message typed right after a reload goes to
// the conversation on screen, not to a new one.
function open(id) {
  state.opened = load(id);
  return state.opened;
}

async function load(id) {
  const ticket = ++state.opening;
  closeStream();
  composer.withdrawQueued();
  composer.setRunning(false);
  composer.say("");
  meter.reset(id);
  sidebar.setCurrent(id);
  transcript.reset();
  if (id == null) {
    state.conversation = null;
    picker.show(null);
    instructions.newChat();
    showTitle(null);
    return;
  }
  $("empty-state").hidden = true;
  state.conversation = null;
  picker.wait();
  let conversation;
  let page;
  try {
    [conversation, page] = await Promise.all([
      api.get(`/api/conversations/${id}`),
      api.get(`/api/conversations/${id}/messages?limit=${PAGE}`),
    ]);
  } catch (error) {
    if (ticket !== state.opening) return;
    picker.show(null);
    showTitle(null);
    composer.say(error.status === 404 ? t("That conversation does not exist or is not yours.") : t("The conversation could not be loaded: {message}", { message: error.message }), "error");
    return;
  }
  if (ticket !== state.opening) return;
  state.conversation = conversation;
  picker.show(conversation);
  instructions.show(conversation);
  showTitle(conversation);
  transcript.showPage(page.items, page.has_more);
  markFirstPage();
  restoreMeter(page.items);
  // A reply still being written: follow it (by its turn id, or the conversation's latest turn
  // when the turn ended between the two requests above; its replay then finishes the view).
  const view = transcript.lastAssistant;
  if (view?.message.status === "running") follow(conversation.running_turn_id, view);
}

// The meter's last state: the final snapshot stored on the newest assistant message that has one.
function restoreMeter(messages) {
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    const metrics = messages[i].result?.context_metrics;
    if (metrics) {
      meter.setMetrics(metrics);
      return;
    }
  }
}

// -- the running turn ----------------------------------------------------------------------

function follow(turnId, view) {
  closeStream();
  composer.setRunning(true);
  sidebar.setRunning(state.conversation.id, true);
  const conversationId = state.conversation.id;
  state.streamingView = view;
  const stream = new TurnStream(conversationId, turnId, {
    onEvent: (name, data, meta) => {
      handleEvent(view, name, data);
      recordEvent(meta.receivedAt);
      transcript.followEnd();
    },
    onConnection: (connection) => composer.connection(connection === "reconnecting"),
    onGiveUp: () => open(conversationId),
  });
  state.stream = stream;
  instrumentation.stream = stream;
  stream.open();
}

// What each event of the turn's stream does to the page (the names are SPEC 6.1's).
const ON_EVENT = {
  "turn.started": (view) => {
    view.startStreaming();
    if (view.restartNote) view.showNote(view.restartNote, "restarted");
  },
  // The worker writing the reply failed and another runs the turn again: what it wrote goes.
  "turn.restarted": (view) => {
    view.startStreaming();
    view.restartNote = t("The reply restarted after a server fault.");
    view.showNote(view.restartNote, "restarted");
  },
  "message.delta": (view, data) => view.appendText(data.text),
  "tool.started": (view, data) => view.toolStarted(data),
  "tool.completed": (view, data) => view.toolCompleted(data),
  "approval.requested": (view, data) => view.approvalRequested(data),
  "approval.decided": (view, data) => view.approvalDecided(data),
  "context.metrics": (_, data) => meter.setMetrics(data),
  "context.compaction": (view, data) => {
    meter.setCompaction(data);
    transcript.addBoundary(view, data);
  },
  "turn.completed": (view, data) => {
    view.render(data.message);
    meter.setMetrics(data.message.result?.context_metrics);
    finishTurn(t("The reply is complete."));
    if (state.conversation?.title_source === "fallback") awaitTitle(state.conversation.id, showGeneratedTitle);
  },
  "turn.cancelled": (view) => {
    view.end("cancelled", null);
    finishTurn(t("The reply was stopped."));
  },
  "turn.failed": (view, data) => {
    view.end(data.code === "interrupted" ? "interrupted" : "failed", { code: data.code, message: data.message });
    finishTurn(t("The reply failed."));
    if (isLocalModelError(data.code)) localModel.refresh();
  },
};

function handleEvent(view, name, data) {
  ON_EVENT[name]?.(view, data);
}

function showGeneratedTitle(conversation) {
  sidebar.upsert(conversation);
  retitle(conversation);
}

function finishTurn(message) {
  meter.endTurn();
  state.stream = null;
  state.streamingView = null;
  instrumentation.stream = null;
  composer.setRunning(false);
  composer.say("");
  if (state.conversation) sidebar.setRunning(state.conversation.id, false);
  announce(message);
}

instrumentation.streamedText = (messageId) => transcript.view(messageId)?.streamed ?? null;

// -- actions -------------------------------------------------------------------------------

async function send(text, attachments) {
  await state.opened;
  if (!state.conversation) {
    const conversation = await api.post("/api/conversations", { title: titleFrom(text || attachments[0]?.filename || ""), generate_title: true, model_profile: picker.forNewChat, instructions: instructions.pending || null });
    state.conversation = conversation;
    meter.reset(conversation.id);
    picker.show(conversation);
    instructions.show(conversation);
    history.pushState({ id: conversation.id }, "", `/c/${conversation.id}`);
    showTitle(conversation);
    sidebar.setCurrent(conversation.id);
    transcript.reset();
  }
  const conversation = state.conversation;
  let started;
  try {
    started = await admitted(() => api.post(`/api/conversations/${conversation.id}/messages`, { content: text, attachment_ids: attachments.map((a) => a.id) }), say);
  } catch (error) {
    if (error.code === "turn_running") {
      await open(conversation.id); // another tab is writing here: follow that reply
      throw new ApiError(409, error.code, t("A reply is already being written here; it is shown now."));
    }
    if (isLocalModelError(error.code)) localModel.refresh();
    throw error;
  }
  transcript.append({ ...started.user_message, attachments: started.user_message.attachments?.length ? started.user_message.attachments : attachments });
  const view = transcript.append(started.assistant_message);
  sidebar.upsert({ ...conversation, running_turn_id: started.turn_id, updated_at: new Date().toISOString() });
  follow(started.turn_id, view);
}

new MessageActions($("messages"), {
  conversation: () => state.conversation,
  busy: () => Boolean(state.stream),
  open,
  say,
  announce,
  focusComposer: () => composer.focus(),
  admitted: (post) => admitted(post, say),
  modelFailed: (code) => {
    if (isLocalModelError(code)) localModel.refresh();
  },
});

setUpLayout();
$("share-button").addEventListener("click", () => {
  if (state.conversation) new ShareDialog(state.conversation.id).show();
});

// A new chat starts in the message box; a page just loaded leaves the focus to the reader, so the
// first Tab reaches the skip link.
$("new-conversation").addEventListener("click", async () => {
  await navigate(null);
  composer.focus();
});
$("logout").addEventListener("click", () => logout());
window.addEventListener("popstate", () => {
  const match = location.pathname.match(/^\/c\/(\d+)$/);
  open(match ? Number(match[1]) : null);
});

transcript.loadOlder = (before) => api.get(`/api/conversations/${state.conversation.id}/messages?before_message_id=${before}&limit=${PAGE}`);
sidebar.reload();
picker.load().then(() => transcript.relabelModels()).catch((error) => composer.say(t("The list of models could not be loaded: {message}", { message: error.message }), "error"));
open(boot.conversation_id);
