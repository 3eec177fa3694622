"""The tail drop (SPEC 5.2.4, second half), the last resort before refusal: the oldest messages
after the system prompt and summary are dropped, whole tool rounds at a time, until the
estimate is within the target. The latest user message and the newest round after it (what
the model must answer) always stay."""

from __future__ import annotations

import logging

from langchain_core.messages import BaseMessage, SystemMessage, ToolMessage

from chat_shell.accounting.calibration import Estimate, estimate
from chat_shell.contracts import CompactionRecord
from chat_shell.guard.stages.records import Compaction
from chat_shell.guard.stages.request_context import RequestContext
from chat_shell.messages.markers import is_summary

logger = logging.getLogger(__name__)


class TailDrop:
    # The view is rewritten: graph state is replaced, not upserted.
    rewrites_state = True

    def __init__(self, ctx: RequestContext) -> None:
        self._ctx = ctx

    def _droppable(self) -> list[list[int]]:
        """Groups of view indices, oldest first: a message with the tool results that answer
        it, before the latest user message, then after it except the newest."""
        view, shown = self._ctx.view, self._ctx.view.shown
        first = 0
        while first < len(view) and (isinstance(shown[first], SystemMessage) or is_summary(shown[first])):
            first += 1
        groups: list[list[int]] = []
        for index in range(first, len(view)):
            if isinstance(shown[index], ToolMessage) and groups:
                groups[-1].append(index)
            else:
                groups.append([index])
        latest = view.latest_human
        before = [g for g in groups if latest is None or g[0] < latest]
        after = [g for g in groups if latest is not None and g[0] > latest][:-1]
        return [*before, *after]

    def __call__(
        self, current: Estimate, target: int, upserts: dict[str, BaseMessage]
    ) -> CompactionRecord | None:
        view = self._ctx.view
        compaction = Compaction.start("tail_drop", self._ctx.budget, current.effective)
        local, dropped = current.local, set[int]()
        projected = current
        for group in self._droppable():
            if projected.effective <= target:
                break
            dropped.update(group)
            local -= sum(view.tokens[i] for i in group)
            # A rewrite voids the provider's report: the calibrated estimates remain.
            projected = estimate(
                local, overhead_tokens=self._ctx.budget.overhead_tokens, fit=current.fit, reported=None
            )
        if not dropped:
            return None
        kept = [message for index, message in enumerate(view.shown) if index not in dropped]
        # The state is replaced by the kept view: earlier upserts are part of it.
        upserts.clear()
        self._ctx.account.sync(kept)
        self._ctx.sources.apply(view, upserts)
        after = self._ctx.account.estimate()
        record = compaction.record("completed", after_tokens=after.effective, removed_items=len(dropped))
        logger.warning(
            "[UnifiedContextGuard] emergency tail drop removed=%d tokens %d->%d target=%d",
            len(dropped),
            current.effective,
            after.effective,
            target,
        )
        return record
