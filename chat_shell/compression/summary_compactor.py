"""Summary compaction: the request stage of the guard (SPEC 5.3).

The live view is split into the system messages, the history to summarize and the recent tail
to keep. The tail is chosen by a token budget (keep, minus the fixed overhead, divided by the
calibrated scale, minus what the summary and the system prompt take) found by binary search
over the cumulative cached counts, then moved to a safe boundary: never between a tool call and
its results, never without the latest user message. The history is summarized in chunks of at
most `trim_tokens_to_summarize` tokens, in order, each call folding in the summary so far, so
every message reaches a summarizer request and a previous summary is folded, not duplicated.

The result is the checkpoint: the summary message (marked `summary_compacted`, opening with a
fixed line for the model) and the tail cloned with fresh ids and marked `checkpoint_retained`.
Everything here is single-pass over cached counts; the only tokenization is of the summaries.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import itertools
import logging
import math
import re
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from time import perf_counter
from typing import Any, NamedTuple

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from chat_shell.compression.calibration import estimate
from chat_shell.compression.token_counter import TOKENS_PER_MESSAGE, TokenCounter
from chat_shell.contracts import CompactionRecord, ContextCompactionEvent
from chat_shell.guard.protocol import Summarizer
from chat_shell.guard.stages import SummaryOutcome, SummaryRequest, compaction_target
from chat_shell.messages.convert import to_chain
from chat_shell.messages.markers import is_summary, with_markers
from chat_shell.providers.errors import classify_provider_error, is_context_overflow
from chat_shell.telemetry import record_protection

logger = logging.getLogger(__name__)

SUMMARY_VERSION = 1
# The first line of every summary message: tells the model what it is reading. Code never
# recognizes a summary by it (a user may type the same words); the marker decides.
SUMMARY_OPENING = (
    "[Summary of earlier turns] The earlier part of this conversation is no longer shown; this "
    "summary replaces it. Treat it as background and continue from the messages after it."
)
# The first line of every summarizer request (the scripted test provider recognizes it).
SUMMARIZER_ROLE = "You are compacting a long conversation between a user and an AI assistant."
SUMMARY_INSTRUCTIONS = f"""{SUMMARIZER_ROLE}
Write a structured summary that another assistant will rely on instead of the transcript.

Keep, with every number, date, amount, count, id, name and path copied verbatim:
1. Hard constraints the user stated: budgets, deadlines, dates, quantities, prohibitions, allergies.
2. Preferences and dislikes.
3. Decisions reached and things already done (so they are not repeated).
4. Open questions and the current task or next step.
5. Key entities: people, products, places, order ids, file paths, URLs, identifiers.
6. Findings from tool results (what was looked up and what it showed).

Drop greetings, chit-chat, repetition and long explanations. If a previous summary is given,
fold it in: keep all of its facts unless the newer transcript overrides them, and do not repeat
it word for word. Write in the language the conversation is written in. Use short headed
sections and bullet points. Stay under {{cap}} tokens. Output only the summary."""
SHORTEN_INSTRUCTIONS = f"""{SUMMARIZER_ROLE}
The summary below is too long. Rewrite it in at most {{cap}} tokens. Keep every hard
constraint, number, date, id and name verbatim; drop the least important details first. Keep
its language and structure. Output only the summary."""
# Room for the instructions and the labels of one summarizer request.
INSTRUCTION_TOKENS = 400
# A message split across chunks is cut by characters in proportion to its cached count; this
# margin absorbs the uneven density of real text.
SPLIT_MARGIN = 0.85
# The previous user message, when it is not in the tail, is kept truncated to this share of keep.
PREVIOUS_USER_SHARE = 0.25
MIN_PREVIOUS_USER_TOKENS = 32
HEARTBEAT_SECONDS = 5.0
_DIGIT = re.compile(r"\d")
_FACT = re.compile(r"[A-Za-z_][\w./-]*\d[\w./-]*|\d[\d,.:/-]*\d|\d")


class SummaryFailed(Exception):
    """The summary could not be made; `reason` goes into the fallback record."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------------------------- the split


@dataclass(frozen=True)
class Split:
    """Indices into the view: `system` leading system messages, then what is summarized (one
    or two ranges, in order) and what is kept (in order)."""

    system: int
    summarized: list[range]
    kept: list[int]
    # The previous user message, kept truncated in front of the tail (None when not needed).
    previous_user: int | None
    previous_user_tokens: int


def _is_user(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) and not is_summary(message)


def _latest_user(messages: Sequence[BaseMessage], start: int, end: int) -> int | None:
    for index in range(end - 1, start - 1, -1):
        if _is_user(messages[index]):
            return index
    return None


def _tail_start(prefix: Sequence[int], lo: int, hi: int, budget: int, messages: Sequence[BaseMessage]) -> int:
    """The earliest index `s` in [lo, hi] with tokens[s:hi] ≤ budget (binary search over the
    cumulative counts `prefix`), moved forward past tool results so no pair is split."""
    start = bisect.bisect_left(prefix, prefix[hi] - budget, lo, hi + 1)
    while start < hi and isinstance(messages[start], ToolMessage):
        start += 1
    return start


def split_view(messages: Sequence[BaseMessage], tokens: Sequence[int], tail_budget: int, keep: int) -> Split:
    """Where to cut the view (pure; O(n) for the cumulative counts, O(log n) for the cut)."""
    system = 0
    while (
        system < len(messages)
        and isinstance(messages[system], SystemMessage)
        and not is_summary(messages[system])
    ):
        system += 1
    end = len(messages)
    prefix = list(itertools.accumulate(tokens, initial=0))
    budget = max(0, tail_budget)
    start = _tail_start(prefix, system, end, budget, messages)
    latest = _latest_user(messages, system, end)
    if latest is None or latest >= start:
        kept = list(range(start, end))
        summarized = [range(system, start)]
    else:
        # The latest user message is always kept whole; the rest of the budget goes to what
        # follows it (the current turn's tool rounds).
        rest = _tail_start(prefix, latest + 1, end, max(0, budget - tokens[latest]), messages)
        kept = [latest, *range(rest, end)]
        summarized = [range(system, latest), range(latest + 1, rest)]
    summarized = [part for part in summarized if part]
    previous_user, previous_tokens = None, 0
    if latest is not None and summarized:
        # Where it fits, the user message before the latest one stays too, shortened.
        previous = _latest_user(messages, system, latest)
        room = min(int(keep * PREVIOUS_USER_SHARE), budget - sum(tokens[i] for i in kept))
        if previous is not None and previous < kept[0] and room >= MIN_PREVIOUS_USER_TOKENS:
            previous_user, previous_tokens = previous, min(room, tokens[previous])
    return Split(system, summarized, kept, previous_user, previous_tokens)


# ---------------------------------------------------------------------------------- rendering


def message_text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict):
            parts.append(f"[{part.get('type', 'media')}]")
    return "\n".join(parts)


TextPart = dict[str, str]
# Message text shorter than this is joined with its neighbours; longer text is its own part.
SHORT_TEXT_CHARS = 2_048


def _text_part(text: str) -> TextPart:
    return {"type": "text", "text": text}


# The transcript line that opens each message (shared, never mutated).
_LABEL_PARTS: dict[type, TextPart] = {
    AIMessage: _text_part("\n\n[assistant]\n"),
    HumanMessage: _text_part("\n\n[user]\n"),
    SystemMessage: _text_part("\n\n[system]\n"),
}


_LABEL_TEXTS: dict[type, str] = {kind: part["text"] for kind, part in _LABEL_PARTS.items()}


@functools.lru_cache(maxsize=256)
def _tool_label(name: str) -> TextPart:
    return _text_part(f"\n\n[tool result: {name}]\n")


def _label_part(message: BaseMessage) -> TextPart:
    part = _LABEL_PARTS.get(type(message))
    if part is not None:
        return part
    if isinstance(message, ToolMessage):
        return _tool_label(message.name or "tool")
    if isinstance(message, AIMessage):
        return _LABEL_PARTS[AIMessage]
    return _LABEL_PARTS[SystemMessage if isinstance(message, SystemMessage) else HumanMessage]


def _calls_text(message: AIMessage) -> str:
    return "".join(f"\n[assistant calls {c['name']}({c['args']!r})]" for c in message.tool_calls)


def transcript_parts(messages: Sequence[BaseMessage]) -> list[TextPart]:
    """The messages as transcript text parts: a label line, the text, any tool calls. A long
    text is referenced as its own part, not copied (the HTTP client writes it once); short
    texts and labels are joined between them, so a part is allocated per long message only."""
    parts: list[TextPart] = []
    short: list[str] = []
    add = short.append
    labels = _LABEL_TEXTS
    for message in messages:
        kind = type(message)
        label = labels.get(kind)
        if label is None:
            label = _label_part(message)["text"]
        add(label)
        text = message.content
        if type(text) is not str:
            text = message_text(message)
        if len(text) < SHORT_TEXT_CHARS:
            add(text)
        else:
            parts.append({"type": "text", "text": "".join(short)})
            parts.append({"type": "text", "text": text})
            short = []
            add = short.append
        if kind is AIMessage and message.tool_calls:  # type: ignore[attr-defined]
            add(_calls_text(message))  # type: ignore[arg-type]
    if short:
        parts.append({"type": "text", "text": "".join(short)})
    return parts


class Chunk(NamedTuple):
    # Transcript text parts in order.
    parts: list[TextPart]
    tokens: int

    @property
    def text(self) -> str:
        return "".join(part["text"] for part in self.parts)


def chunk_transcript(
    messages: Sequence[BaseMessage], tokens: Sequence[int], chunk_tokens: int
) -> list[Chunk]:
    """The messages as transcript parts in order, packed into chunks of at most about
    `chunk_tokens` by their cached counts: the runs of whole messages that fit are found by
    binary search over the cumulative counts. A message larger than a chunk is cut by
    characters, in proportion to its count, and continues in the next chunks; nothing is left
    out."""
    budget = max(1, chunk_tokens)
    prefix = list(itertools.accumulate(tokens, initial=0))
    chunks: list[Chunk] = []
    parts: list[TextPart] = []
    used = 0
    index, end = 0, len(messages)
    while index < end:
        if tokens[index] > budget:
            parts, used = _cut(messages[index], tokens[index], budget, parts, used, chunks)
            index += 1
            continue
        stop = bisect.bisect_right(prefix, prefix[index] + budget - used, index + 1, end + 1) - 1
        if stop == index:  # the next message does not fit the room left: a new chunk
            chunks.append(Chunk(parts, used))
            parts, used = [], 0
            continue
        parts.extend(transcript_parts(messages[index:stop]))
        used += prefix[stop] - prefix[index]
        index = stop
        if index < end and tokens[index] <= budget:
            chunks.append(Chunk(parts, used))
            parts, used = [], 0
    if parts:
        chunks.append(Chunk(parts, used))
    return chunks


def _cut(
    message: BaseMessage, count: int, budget: int, parts: list[TextPart], used: int, chunks: list[Chunk]
) -> tuple[list[TextPart], int]:
    """Add an oversized message in pieces that fill the open chunk (`parts`, `used`) and then
    whole chunks; returns the chunk its last piece leaves open."""
    body = message_text(message)
    density = len(body) / max(1, count)  # characters per token of this message
    label = _label_part(message)["text"]
    start, piece = 0, 1
    while start < len(body):
        room = budget - used
        if room < budget // 10:
            chunks.append(Chunk(parts, used))
            parts, used = [], 0
            continue
        stop = min(len(body), start + max(1, int(room * density * SPLIT_MARGIN)))
        note = label if piece == 1 else f"{label[:-1]} (continued, part {piece})\n"
        parts.extend((_text_part(note), _text_part(body[start:stop])))
        used += math.ceil((stop - start) / density)
        start, piece = stop, piece + 1
        if start < len(body):
            chunks.append(Chunk(parts, used))
            parts, used = [], 0
    if isinstance(message, AIMessage) and message.tool_calls:
        parts.append(_text_part(_calls_text(message)))
    return parts, used


def facts(text: str) -> set[str]:
    """Numbers and identifiers (anything holding a digit) in `text`."""
    # Most text holds no digit at all: one C-level scan rules it out.
    return set(_FACT.findall(text)) if _DIGIT.search(text) else set()


def retention_score(sources: Sequence[str], summary: str) -> float | None:
    """The share of the numbers and identifiers of `sources` that the summary repeats."""
    wanted: set[str] = set()
    for text in sources:
        wanted |= facts(text)
    if not wanted:
        return None
    return round(sum(1 for fact in wanted if fact in summary) / len(wanted), 4)


# ---------------------------------------------------------------------------------- the stage


_locks: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()


def conversation_lock(conversation_id: int) -> asyncio.Lock:
    """At most one compaction per conversation at a time, across turns and attempts."""
    lock = _locks.get(conversation_id)
    if lock is None:
        lock = asyncio.Lock()
        _locks[conversation_id] = lock
    return lock


class _Watchdog:
    """One task per compaction: the `in_progress` heartbeat every few seconds, and the backstop
    of each summarizer call (what `asyncio.wait_for` does, without a timer per call: a long
    history makes hundreds of chunk calls). A call past its deadline is cancelled and becomes
    `SummaryFailed("summarizer_timeout")`."""

    def __init__(self, timeout: float, heartbeat: float, beat: Callable[[], None]) -> None:
        self.timeout = timeout
        self._heartbeat = heartbeat
        self._beat = beat
        self.deadline: float | None = None
        self.fired = False
        self.task: asyncio.Task[Any] | None = None
        self._runner: asyncio.Task[None] | None = None

    def __enter__(self) -> _Watchdog:
        self.task = asyncio.current_task()
        self._runner = asyncio.create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._runner is not None
        self._runner.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_beat = loop.time() + self._heartbeat
        while True:
            now = loop.time()
            deadline = self.deadline
            if deadline is not None and now >= deadline:
                self.fired = True
                assert self.task is not None
                self.task.cancel()
                return
            if now >= next_beat:
                self._beat()
                next_beat = now + self._heartbeat
            # Without a call running, wake within one timeout so a call started meanwhile is
            # never overrun by more than its own deadline.
            wake = min(next_beat, deadline if deadline is not None else now + self.timeout)
            await asyncio.sleep(max(0.0, wake - now))

    def call(self) -> _CallDeadline:
        """`with watchdog.call(): await ...`: the deadline of one summarizer call."""
        return self._call_deadline

    @functools.cached_property
    def _call_deadline(self) -> _CallDeadline:
        return _CallDeadline(self)


class _CallDeadline:
    """A plain context manager (no coroutine, no timer) around one summarizer call."""

    def __init__(self, watchdog: _Watchdog) -> None:
        self._watchdog = watchdog
        self._loop = asyncio.get_running_loop()

    def __enter__(self) -> None:
        watchdog = self._watchdog
        watchdog.deadline = self._loop.time() + watchdog.timeout

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: object) -> None:
        watchdog = self._watchdog
        watchdog.deadline = None
        if kind is asyncio.CancelledError and watchdog.fired:
            assert watchdog.task is not None
            watchdog.task.uncancel()
            raise SummaryFailed("summarizer_timeout") from exc


class SummaryCompactor:
    """The `SummaryCompactor` of the guard (see `chat_shell.guard.stages`)."""

    def __init__(
        self,
        summarize: Summarizer,
        *,
        conversation_id: int,
        checkpoint_message_id: int | None = None,
        timeout_seconds: float = 120.0,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        ids: Callable[[], str] | None = None,
    ) -> None:
        self._summarize = summarize
        self._conversation_id = conversation_id
        self._checkpoint_message_id = checkpoint_message_id
        self._timeout = timeout_seconds
        self._heartbeat = heartbeat_seconds
        self._new_id = ids or (lambda: f"ckpt-{uuid.uuid4().hex}")

    async def __call__(self, request: SummaryRequest) -> SummaryOutcome:
        async with conversation_lock(self._conversation_id):
            return await self._compact(request)

    # -- orchestration -------------------------------------------------------------------

    async def _compact(self, request: SummaryRequest) -> SummaryOutcome:
        started_at = datetime.now(UTC)
        started = perf_counter()
        budget = request.budget
        before = request.estimate.effective
        base = {
            "before_tokens": before,
            "trigger": budget.trigger,
            "keep": budget.keep,
            "created_at": started_at,
        }
        self._status(request, CompactionRecord(status="started", **base))
        watchdog = _Watchdog(
            self._timeout,
            self._heartbeat,
            lambda: self._status(request, CompactionRecord(status="in_progress", **base)),
        )
        try:
            with watchdog:
                checkpoint = await self._checkpoint(request, watchdog)
        except asyncio.CancelledError:
            logger.info("[SummaryCompact] conversation=%s status=cancelled", self._conversation_id)
            raise
        except SummaryFailed as failure:
            record = CompactionRecord(
                status="fallback",
                failure_reason=failure.reason,
                duration_ms=round((perf_counter() - started) * 1000, 3),
                **base,
            )
            self._status(request, record)
            return SummaryOutcome(record=record)
        messages, summary_text, removed, chunks, score = checkpoint
        local = request.fixed_tokens + sum(request.counter.count_message(m).tokens for m in messages)
        after = estimate(
            local, overhead_tokens=budget.overhead_tokens, fit=request.estimate.fit, reported=None
        ).effective
        record = CompactionRecord(
            status="completed",
            after_tokens=after,
            removed_items=removed,
            duration_ms=round((perf_counter() - started) * 1000, 3),
            summary_text=summary_text,
            checkpoint_message_id=self._checkpoint_message_id,
            retention_score=score,
            chunks=chunks,
            **base,
        )
        chain = [to_chain(m) for m in messages if not isinstance(m, SystemMessage) or is_summary(m)]
        self._status(request, record, checkpoint_chain=chain)
        return SummaryOutcome(record=record, messages=messages)

    def _status(
        self,
        request: SummaryRequest,
        record: CompactionRecord,
        checkpoint_chain: list[Any] | None = None,
    ) -> None:
        request.emit(ContextCompactionEvent(record=record, checkpoint_chain=checkpoint_chain))
        if record.status in ("completed", "fallback"):
            record_protection(
                "summary_compact",
                record.status,
                duration_ms=record.duration_ms,
                before_tokens=record.before_tokens,
                after_tokens=record.after_tokens,
                removed_history_items=record.removed_items,
                chunks=record.chunks,
                failure_reason=record.failure_reason,
                forced=request.forced,
            )
        logger.info(
            "[SummaryCompact] conversation=%s message=%s status=%s before=%s after=%s trigger=%s keep=%s "
            "removed=%s chunks=%s duration_ms=%s retention=%s forced=%s failure_reason=%s",
            self._conversation_id,
            self._checkpoint_message_id,
            record.status,
            record.before_tokens,
            record.after_tokens,
            record.trigger,
            record.keep,
            record.removed_items,
            record.chunks,
            record.duration_ms,
            record.retention_score,
            request.forced,
            record.failure_reason,
        )

    # -- the checkpoint ------------------------------------------------------------------

    def tail_budget(self, request: SummaryRequest, system_tokens: int) -> int:
        """Local tokens the kept tail may take so that the request after compaction, fixed
        overhead and summary included, is estimated at most `keep` by every estimate."""
        budget, fit = request.budget, request.estimate.fit
        keep = compaction_target(budget, request.estimate, forced=request.forced)
        summary_tokens = budget.summary_max_tokens + TOKENS_PER_MESSAGE + 64  # + the opening line
        rest = request.fixed_tokens + system_tokens + summary_tokens
        configured = keep - budget.overhead_tokens - rest
        if not fit.fitted:
            return configured
        return min(configured, math.floor((keep - fit.fixed_overhead) / fit.scale) - rest)

    async def _checkpoint(
        self, request: SummaryRequest, watchdog: _Watchdog
    ) -> tuple[list[BaseMessage], str, int, int, float | None]:
        messages, tokens, budget = request.messages, request.message_tokens, request.budget
        system_end = 0
        while system_end < len(messages) and isinstance(messages[system_end], SystemMessage):
            system_end += 1
        split = split_view(messages, tokens, self.tail_budget(request, sum(tokens[:system_end])), budget.keep)
        if not split.summarized:
            raise SummaryFailed("nothing_to_summarize")
        summarized = [m for part in split.summarized for m in messages[part.start : part.stop]]
        summarized_tokens = [t for part in split.summarized for t in tokens[part.start : part.stop]]
        # A previous summary (right after the system prompt) is folded in, not re-summarized.
        previous = [m for m in summarized[:1] if is_summary(m)]
        rest, rest_tokens = summarized[len(previous) :], summarized_tokens[len(previous) :]
        if not rest:
            raise SummaryFailed("nothing_to_summarize")
        chunk_tokens = budget.trim_tokens_to_summarize - budget.summary_max_tokens - INSTRUCTION_TOKENS
        chunks = chunk_transcript(rest, rest_tokens, chunk_tokens)
        summary = "\n\n".join(_summary_body(m) for m in previous)
        for chunk in chunks:
            summary = await self._summarize_chunk(request, watchdog, summary, chunk)
        if not summary.strip():
            raise SummaryFailed("empty_summary")
        summary_message = with_markers(
            HumanMessage(f"{SUMMARY_OPENING}\n\n{summary}", id=self._new_id()),
            summary_compacted=True,
            summary_version=SUMMARY_VERSION,
        )
        kept: list[BaseMessage] = [*messages[: split.system], summary_message]
        if split.previous_user is not None:
            previous_user = messages[split.previous_user]
            shortened = self._shortened(request, previous_user, split.previous_user_tokens)
            kept.append(self._retain(shortened))
        kept.extend(self._retain(messages[i]) for i in split.kept)
        # The user's own statements (and what an earlier summary kept of them) are what the
        # score checks; bulk tool output is mostly ids no summary should repeat.
        sources = [message_text(m) for m in summarized if type(m) is HumanMessage]
        score = retention_score(sources, summary)
        return kept, summary, len(summarized), len(chunks), score

    def _retain(self, message: BaseMessage) -> BaseMessage:
        clone = message.model_copy(update={"id": self._new_id()})
        return with_markers(clone, checkpoint_retained=True)

    @staticmethod
    def _shortened(request: SummaryRequest, message: BaseMessage, max_tokens: int) -> BaseMessage:
        text = message_text(message)
        kept = request.counter.text.head(text, max(1, max_tokens - TOKENS_PER_MESSAGE))
        if kept == text and isinstance(message.content, str):
            return message
        return message.model_copy(update={"content": f"{kept} […]" if kept != text else kept})

    async def _summarize_chunk(
        self, request: SummaryRequest, watchdog: _Watchdog, previous: str, chunk: Chunk
    ) -> str:
        cap = request.budget.summary_max_tokens
        opening = f"<previous_summary>\n{previous}\n</previous_summary>\n\n" if previous else ""
        wrapped = [_text_part(f"{opening}<transcript>"), *chunk.parts, _CLOSING_PART]
        # Built from known-valid parts: no validation pass over every part of a large request.
        transcript = HumanMessage.model_construct(
            content=wrapped, additional_kwargs={}, response_metadata={}, type="human", name=None, id=None
        )
        summary = await self._call(watchdog, [_instructions(cap), transcript])
        # No character is more than 4 tokens (its UTF-8 bytes): a short summary needs no count.
        if len(summary) * 4 <= cap:
            return summary
        return await self._within_cap(watchdog, request.counter, summary, cap)

    async def _within_cap(self, watchdog: _Watchdog, counter: TokenCounter, summary: str, cap: int) -> str:
        """The summary under its hard cap: a second, shortening pass, then a hard cut."""
        if counter.count_text(summary) <= cap:
            return summary
        shorter = await self._call(
            watchdog, [SystemMessage(SHORTEN_INSTRUCTIONS.format(cap=cap)), HumanMessage(summary)]
        )
        if counter.count_text(shorter) <= cap:
            return shorter
        return counter.text.head(shorter, cap)

    async def _call(self, watchdog: _Watchdog, prompt: list[BaseMessage]) -> str:
        """One summarizer call under the provider timeout, the watchdog's backstop and the
        overflow safety net (a request the provider finds too long is split once)."""
        try:
            with watchdog.call():
                return await self._summarize(prompt)
        except SummaryFailed:
            raise
        except Exception as exc:
            if not is_context_overflow(exc):
                raise self._failure(exc) from exc
        # The provider counts more than we do: summarize the transcript in two halves, once.
        system, user = prompt[0], message_text(prompt[-1])
        middle = len(user) // 2
        summary = ""
        for half in (user[:middle], user[middle:]):
            body = f"<previous_summary>\n{summary}\n</previous_summary>\n\n{half}" if summary else half
            try:
                with watchdog.call():
                    summary = await self._summarize([system, HumanMessage(body)])
            except SummaryFailed:
                raise
            except Exception as exc:
                if is_context_overflow(exc):
                    raise SummaryFailed("summarizer_context_overflow") from exc
                raise self._failure(exc) from exc
        return summary

    @staticmethod
    def _failure(exc: Exception) -> SummaryFailed:
        failure = classify_provider_error(exc)
        if failure is None:
            logger.exception("[SummaryCompact] the summarizer failed unexpectedly")
            return SummaryFailed("summarizer_error")
        if failure.code == "provider_timeout":
            return SummaryFailed("summarizer_timeout")
        return SummaryFailed(f"summarizer_{failure.code}")


_CLOSING_PART = _text_part("\n</transcript>")


@functools.cache
def _instructions(cap: int) -> SystemMessage:
    return SystemMessage(SUMMARY_INSTRUCTIONS.format(cap=cap))


def _summary_body(message: BaseMessage) -> str:
    """A previous summary without its opening line (the line is for the answering model)."""
    text = message_text(message)
    return text.removeprefix(SUMMARY_OPENING).lstrip("\n")
