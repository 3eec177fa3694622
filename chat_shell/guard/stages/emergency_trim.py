"""The emergency trim (SPEC 5.2.4, first half): while the request is over its target, the
largest source-owned messages are shown under their source's stricter policy (× 0.3)."""

from __future__ import annotations

import logging
from time import perf_counter

from langchain_core.messages import BaseMessage

from chat_shell.accounting.calibration import Estimate
from chat_shell.contracts import CompactionRecord
from chat_shell.guard.stages.records import Compaction
from chat_shell.guard.stages.request_context import RequestContext
from chat_shell.guard.stages.source import Cuts, show

logger = logging.getLogger(__name__)


class EmergencyTrim:
    # Messages are shown differently (same ids, upserted); graph state is not replaced.
    rewrites_state = False

    def __init__(self, ctx: RequestContext) -> None:
        self._ctx = ctx

    def __call__(
        self, current: Estimate, target: int, upserts: dict[str, BaseMessage]
    ) -> CompactionRecord | None:
        """Re-render until the estimate is within `target`; the record, when anything changed."""
        view, counter = self._ctx.view, self._ctx.sources.ctx.counter
        compaction = Compaction.start("emergency_truncate", self._ctx.budget, current.effective)
        candidates = sorted(
            (-view.tokens[i], i)
            for i in range(len(view))
            if self._ctx.sources.owner(view.shown[i]) is not None
        )
        cuts = Cuts()
        for _, index in candidates:
            if current.effective <= target:
                break
            started = perf_counter()
            old = view.tokens[index]
            rendered = self._ctx.sources.render_emergency(view.shown[index], old)
            if rendered is None or counter.count_message(rendered[1]).tokens >= old:
                continue
            source, shown = rendered
            show(view, index, shown, upserts)
            cuts.add(source, old, view.tokens[index], started)
            current = self._ctx.account.estimate()
        if not cuts.by_source:
            return None
        cuts.trace(emergency=True)
        record = compaction.record("completed", after_tokens=current.effective, removed_items=cuts.messages)
        logger.warning(
            "[UnifiedContextGuard] emergency re-truncation rewrote=%d tokens %d->%d target=%d",
            record.removed_items,
            record.before_tokens,
            current.effective,
            target,
        )
        return record
