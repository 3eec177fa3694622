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
import functools
import logging
import math
import uuid
import weakref
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from chat_shell.accounting.calibration import estimate
from chat_shell.accounting.token_counter import TOKENS_PER_MESSAGE, TokenCounter
from chat_shell.contracts import FINAL_STATUSES, CompactionRecord, ContextCompactionEvent
from chat_shell.guard.protocol import Summarizer
from chat_shell.guard.stages.records import Compaction, Strategy
from chat_shell.guard.stages.summary_compaction.prompts import (
    INSTRUCTION_TOKENS,
    LANGUAGE_REQUIREMENTS,
    REWRITE_INSTRUCTIONS,
    SHORTEN_INSTRUCTIONS,
    SUMMARY_INSTRUCTIONS,
    SUMMARY_OPENING,
    SUMMARY_VERSION,
)
from chat_shell.guard.stages.summary_compaction.request import SummaryOutcome, SummaryRequest
from chat_shell.guard.stages.summary_compaction.retention import retention_score
from chat_shell.guard.stages.summary_compaction.settings import CompactionSettings
from chat_shell.guard.stages.summary_compaction.split import split_view
from chat_shell.guard.stages.summary_compaction.summary_input import (
    Chunk,
    TextPart,
    chunk_transcript,
    conversation_language,
    in_language,
    message_text,
    text_part,
)
from chat_shell.guard.stages.summary_compaction.watchdog import Watchdog
from chat_shell.languages import CjkLanguage
from chat_shell.messages.convert import to_chain
from chat_shell.messages.markers import is_summary, markers, with_markers
from chat_shell.providers.errors import classify_provider_error, is_context_overflow
from chat_shell.tasks import running
from chat_shell.telemetry import record_protection

logger = logging.getLogger(__name__)
# The record's fields a final compaction status puts on its `context_protection` span event.
_TRACED_FIELDS = frozenset({"duration_ms", "before_tokens", "after_tokens", "chunks", "failure_reason"})


class SummaryFailed(Exception):
    """The summary could not be made; `reason` goes into the fallback record."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_locks: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()


def conversation_lock(conversation_id: int) -> asyncio.Lock:
    """At most one compaction per conversation at a time, across turns and attempts."""
    lock = _locks.get(conversation_id)
    if lock is None:
        lock = asyncio.Lock()
        _locks[conversation_id] = lock
    return lock


@dataclass(eq=False)
class SummaryCompactor:
    """The guard's summary stage (a `SummaryStage`).

    Inside a turn (`summary_compact`) every kept message is cloned with a fresh id, so the
    turn's finalizer persists it. Ahead of time (`summary_ahead`, between turns) the checkpoint
    is stored on the finished turn's assistant message: its own messages (`own_ids`) are kept
    as they are, since they are that message's chain, and only earlier messages are cloned."""

    summarize: Summarizer
    _: KW_ONLY
    conversation_id: int
    checkpoint_message_id: int | None = None
    settings: CompactionSettings = field(default_factory=CompactionSettings)
    strategy: Strategy = "summary_compact"
    own_ids: frozenset[str] = frozenset()

    async def __call__(self, request: SummaryRequest) -> SummaryOutcome:
        async with conversation_lock(self.conversation_id):
            return await self._compact(request)

    # -- orchestration -------------------------------------------------------------------

    async def _compact(self, request: SummaryRequest) -> SummaryOutcome:
        budget = request.budget
        compaction = Compaction.start(self.strategy, budget, request.estimate.effective)
        self._status(request, compaction.record("started"))
        watchdog = Watchdog(
            self.settings.summary_timeout_seconds,
            self.settings.heartbeat_seconds,
            lambda: self._status(request, compaction.record("in_progress")),
        )
        try:
            with running(watchdog.run()):
                checkpoint = await self._checkpoint(request, watchdog)
        except asyncio.CancelledError:
            logger.info("[SummaryCompact] conversation=%s status=cancelled", self.conversation_id)
            raise
        except SummaryFailed as failure:
            record = compaction.record("fallback", failure_reason=failure.reason)
            self._status(request, record)
            return SummaryOutcome(record=record)
        messages, summary_text, removed, chunks, score, first_kept = checkpoint
        local = request.fixed_tokens + sum(request.counter.count_message(m).tokens for m in messages)
        after = estimate(
            local, overhead_tokens=budget.overhead_tokens, fit=request.estimate.fit, reported=None
        ).effective
        record = compaction.record(
            "completed",
            after_tokens=after,
            removed_items=removed,
            summary_text=summary_text,
            checkpoint_message_id=self.checkpoint_message_id,
            retention_score=score,
            chunks=chunks,
            first_kept_message_id=first_kept,
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
        if record.status in FINAL_STATUSES:
            record_protection(
                "summary_compact",
                record.status,
                removed_history_items=record.removed_items,
                forced=request.forced,
                **record.model_dump(include=set(_TRACED_FIELDS)),
            )
        logger.info(
            "[SummaryCompact] strategy=%s conversation=%s message=%s status=%s before=%s after=%s "
            "trigger=%s keep=%s removed=%s chunks=%s duration_ms=%s retention=%s forced=%s failure_reason=%s",
            record.strategy,
            self.conversation_id,
            self.checkpoint_message_id,
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

    def _tail_budget(self, request: SummaryRequest, system_tokens: int) -> int:
        """Local tokens the kept tail may take so that the request after compaction, fixed
        overhead and summary included, is estimated at most `keep` by every estimate."""
        budget, fit = request.budget, request.estimate.fit
        keep = budget.compaction_target(request.estimate.effective, forced=request.forced)
        summary_tokens = budget.summary_max_tokens + TOKENS_PER_MESSAGE + 64  # + the opening line
        rest = request.fixed_tokens + system_tokens + summary_tokens
        configured = keep - budget.overhead_tokens - rest
        if not fit.fitted:
            return configured
        return min(configured, math.floor((keep - fit.fixed_overhead) / fit.scale) - rest)

    async def _checkpoint(
        self, request: SummaryRequest, watchdog: Watchdog
    ) -> tuple[list[BaseMessage], str, int, int, float | None, int | None]:
        messages, tokens, budget = request.messages, request.message_tokens, request.budget
        system_end = 0
        while system_end < len(messages) and isinstance(messages[system_end], SystemMessage):
            system_end += 1
        tail_budget = self._tail_budget(request, sum(tokens[:system_end]))
        split = split_view(
            messages, tokens, tail_budget, budget.keep, whole_last_turn=self.strategy == "summary_ahead"
        )
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
        language = conversation_language(messages)
        for chunk in chunks:
            summary = await self._summarize_chunk(request, watchdog, summary, chunk, language)
        # Checked once, on the summary that is kept: each chunk's summary only feeds the next.
        if language is not None and not in_language(summary, language):
            summary = await self._capped(
                request, watchdog, await self._in_language(watchdog, summary, language)
            )
        if not summary.strip():
            raise SummaryFailed("empty_summary")
        summary_message = with_markers(
            HumanMessage(f"{SUMMARY_OPENING}\n\n{summary}", id=_new_id()),
            summary_compacted=True,
            summary_version=SUMMARY_VERSION,
        )
        kept: list[BaseMessage] = [*messages[: split.system], summary_message]
        verbatim = list(split.kept)
        if split.previous_user is not None:
            previous_user = messages[split.previous_user]
            shortened = self._shortened(request, previous_user, split.previous_user_tokens)
            kept.append(self._retain(shortened))
            if shortened is previous_user:
                verbatim.insert(0, split.previous_user)
        kept.extend(self._retain(messages[i]) for i in split.kept)
        # The user's own statements (and what an earlier summary kept of them) are what the
        # score checks; bulk tool output is mostly ids no summary should repeat.
        sources = [message_text(m) for m in summarized if type(m) is HumanMessage]
        score = retention_score(sources, summary)
        # The user-visible message the kept tail starts at (where the transcript draws the line).
        first_kept = next(
            (ident for i in verbatim if (ident := markers(messages[i]).source_message_id) is not None), None
        )
        return kept, summary, len(summarized), len(chunks), score, first_kept

    def _retain(self, message: BaseMessage) -> BaseMessage:
        if message.id is not None and message.id in self.own_ids:
            return message
        clone = message.model_copy(update={"id": _new_id()})
        return with_markers(clone, checkpoint_retained=True)

    @staticmethod
    def _shortened(request: SummaryRequest, message: BaseMessage, max_tokens: int) -> BaseMessage:
        text = message_text(message)
        kept = request.counter.text.head(text, max(1, max_tokens - TOKENS_PER_MESSAGE))
        if kept == text and isinstance(message.content, str):
            return message
        return message.model_copy(update={"content": f"{kept} […]" if kept != text else kept})

    async def _summarize_chunk(
        self,
        request: SummaryRequest,
        watchdog: Watchdog,
        previous: str,
        chunk: Chunk,
        language: CjkLanguage | None,
    ) -> str:
        cap = request.budget.summary_max_tokens
        opening = f"<previous_summary>\n{previous}\n</previous_summary>\n\n" if previous else ""
        wrapped: list[str | dict[str, Any]] = [
            text_part(f"{opening}<transcript>"),
            *chunk.parts,
            _closing_part(language),
        ]
        # Built from known-valid parts: no validation pass over every part of a large request.
        transcript = HumanMessage.model_construct(
            content=wrapped, additional_kwargs={}, response_metadata={}, type="human", name=None, id=None
        )
        return await self._capped(
            request, watchdog, await self._call(watchdog, [_instructions(cap), transcript])
        )

    async def _capped(self, request: SummaryRequest, watchdog: Watchdog, summary: str) -> str:
        cap = request.budget.summary_max_tokens
        # No character is more than 4 tokens (its UTF-8 bytes): a short summary needs no count.
        if len(summary) * 4 <= cap:
            return summary
        return await self._within_cap(watchdog, request.counter, summary, cap)

    async def _in_language(self, watchdog: Watchdog, summary: str, language: CjkLanguage) -> str:
        """A summary written in another language than the conversation's, rewritten once in it
        (kept as it is when the rewrite is not in it either)."""
        rewritten = await self._call(
            watchdog,
            [
                SystemMessage(REWRITE_INSTRUCTIONS[language]),
                HumanMessage(f"{summary}\n\n{LANGUAGE_REQUIREMENTS[language]}"),
            ],
        )
        return rewritten if in_language(rewritten, language) else summary

    async def _within_cap(self, watchdog: Watchdog, counter: TokenCounter, summary: str, cap: int) -> str:
        """The summary under its hard cap: a second, shortening pass, then a hard cut."""
        if counter.count_text(summary) <= cap:
            return summary
        shorter = await self._call(
            watchdog, [SystemMessage(SHORTEN_INSTRUCTIONS.format(cap=cap)), HumanMessage(summary)]
        )
        if counter.count_text(shorter) <= cap:
            return shorter
        return counter.text.head(shorter, cap)

    async def _call(self, watchdog: Watchdog, prompt: list[BaseMessage]) -> str:
        """One summarizer call under the provider timeout, the watchdog's backstop and the
        overflow safety net (a request the provider finds too long is split once)."""
        try:
            with watchdog.call():
                return await self.summarize(prompt)
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
                    summary = await self.summarize([system, HumanMessage(body)])
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


@functools.cache
def _closing_part(language: CjkLanguage | None) -> TextPart:
    """The end of the transcript, and for a CJK conversation the language requirement after it."""
    requirement = f"\n\n{LANGUAGE_REQUIREMENTS[language]}" if language is not None else ""
    return text_part(f"\n</transcript>{requirement}")


@functools.cache
def _instructions(cap: int) -> SystemMessage:
    return SystemMessage(SUMMARY_INSTRUCTIONS.format(cap=cap))


def _new_id() -> str:
    """A fresh id for a summary or a retained clone: the finalizer keeps what the turn made."""
    return f"ckpt-{uuid.uuid4().hex}"


def _summary_body(message: BaseMessage) -> str:
    """A previous summary without its opening line (the line is for the answering model)."""
    text = message_text(message)
    return text.removeprefix(SUMMARY_OPENING).lstrip("\n")
