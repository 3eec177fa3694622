"""Context metrics (SPEC 5.7): the tracker that builds the guard's snapshots and decides,
through its throttle, which of them reach the event stream.

`used_input` is the effective estimate, and every one of its tokens is attributed to exactly
one source: local counts go to the source that owns them; the fixed per-request overhead the
provider adds (hidden prompt, tool scaffolding) is its own source, `overhead`; any remaining
scale correction is spread over the sources in proportion to their local counts. `used_input`
of `available_input` (the window minus the reply's reserve) is the one definition the meter,
the dashboard and the utilization histogram share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from chat_shell.accounting.budget import Budget
from chat_shell.accounting.calibration import Estimate
from chat_shell.contracts import (
    BREAKDOWN_SOURCES,
    CompactionRecord,
    ContextMetrics,
    ContextMetricsEvent,
    ContextState,
)
from chat_shell.guard.protocol import EventSink
from chat_shell.providers.profiles import ModelProfile

THROTTLE_BUCKET_PERCENT = 5


def attribute(local_parts: Mapping[str, int], *, effective: int, fixed_overhead: int) -> dict[str, int]:
    """Split `effective` over the breakdown sources; the values sum to `effective` exactly."""
    local_by_source = {source: max(0, int(local_parts.get(source, 0))) for source in BREAKDOWN_SOURCES}
    parts = dict(local_by_source)
    local = sum(local_by_source.values())
    extra = max(0, effective - local)
    fixed = min(extra, max(0, fixed_overhead))
    parts["overhead"] += fixed
    rest = extra - fixed
    if rest and local:
        shares = {source: rest * tokens / local for source, tokens in local_by_source.items() if tokens}
        given = {source: int(share) for source, share in shares.items()}
        remainder = rest - sum(given.values())
        # Largest remainder first, so the integer parts still sum exactly.
        for source in sorted(shares, key=lambda s: (given[s] - shares[s], s))[:remainder]:
            given[source] += 1
        for source, tokens in given.items():
            parts[source] += tokens
    elif rest:
        parts["overhead"] += rest
    return parts


def context_state(
    *, effective: int, budget: Budget, refused: bool, compacted: bool, compacting: bool = False
) -> ContextState:
    if refused:
        return "refused"
    if compacting:
        return "compacting"
    if compacted:
        return "compacted"
    if effective >= budget.warning_from:
        return "warning"
    return "normal"


def snapshot(
    *,
    phase: str,
    profile: ModelProfile,
    budget: Budget,
    estimate: Estimate,
    local_parts: Mapping[str, int],
    state: ContextState,
    latest_compaction: CompactionRecord | None,
) -> ContextMetrics:
    used = estimate.effective
    available = budget.available_input
    remaining = max(0, available - used)
    fit = estimate.fit
    return ContextMetrics(
        phase=phase,
        profile=profile.name,
        profile_source=profile.source,
        context_window=budget.context_window,
        reserved_output=budget.reserved_output,
        available_input=available,
        used_input=used,
        remaining=remaining,
        remaining_percent=remaining_percent(used, available),
        trigger=budget.trigger,
        keep=budget.keep,
        over_trigger=used >= budget.trigger,
        state=state,
        breakdown=attribute(local_parts, effective=used, fixed_overhead=estimate.fixed_overhead),
        estimate_source=estimate.source,
        calibration={
            "local_tokens": estimate.local,
            "configured_tokens": estimate.configured,
            "calibrated_tokens": estimate.calibrated,
            "reported_tokens": estimate.reported,
            "fixed_overhead": round(fit.fixed_overhead, 1),
            "scale": round(fit.scale, 4),
            "samples": fit.samples,
            "fitted": fit.fitted,
            "provider_reports_usage": profile.streams_usage,
        },
        latest_compaction=latest_compaction,
    )


@dataclass(frozen=True)
class Pressure:
    """What the throttle compares, known before a snapshot is built."""

    state: ContextState
    over_trigger: bool
    remaining_percent: float

    @property
    def bucket(self) -> int:
        return int(self.remaining_percent // THROTTLE_BUCKET_PERCENT)


def remaining_percent(used: int, available: int) -> float:
    return round(100.0 * max(0, available - used) / available, 1) if available else 0.0


def pressure(*, effective: int, budget: Budget, state: ContextState) -> Pressure:
    return Pressure(
        state=state,
        over_trigger=effective >= budget.trigger,
        remaining_percent=remaining_percent(effective, budget.available_input),
    )


class MetricsThrottle:
    """Emit a snapshot only when something a reader would notice changed: the first one of a
    turn, a hook call that changed the view, a new state, a trigger crossing, or a move to
    another 5% bucket of the remaining input. Decided before any snapshot is built."""

    def __init__(self) -> None:
        self._last: Pressure | None = None

    def should_emit(self, current: Pressure, *, changed: bool) -> bool:
        last = self._last
        emit = (
            last is None
            or changed
            or current.state != last.state
            or current.over_trigger != last.over_trigger
            or current.bucket != last.bucket
        )
        if emit:
            self._last = current
        return emit


class ContextMetricsTracker:
    """The snapshots of one guard: built from its estimate and the local tokens by source
    (`local_parts`), published through the throttle. After a refusal every snapshot says so."""

    def __init__(
        self,
        profile: ModelProfile,
        budget: Budget,
        emit: EventSink,
        local_parts: Callable[[], Mapping[str, int]],
    ) -> None:
        self._profile = profile
        self._budget = budget
        self._emit = emit
        self._local_parts = local_parts
        self._throttle = MetricsThrottle()
        self.refused = False

    def _state(self, current: Estimate, compactions: Sequence[CompactionRecord]) -> ContextState:
        return context_state(
            effective=current.effective,
            budget=self._budget,
            refused=self.refused,
            compacted=any(r.status == "completed" for r in compactions),
        )

    def snapshot(
        self, phase: str, current: Estimate, compactions: Sequence[CompactionRecord]
    ) -> ContextMetrics:
        return snapshot(
            phase=phase,
            profile=self._profile,
            budget=self._budget,
            estimate=current,
            local_parts=self._local_parts(),
            state=self._state(current, compactions),
            latest_compaction=compactions[-1] if compactions else None,
        )

    def publish(
        self, phase: str, current: Estimate, compactions: Sequence[CompactionRecord], *, changed: bool
    ) -> None:
        """Emit the snapshot when the throttle lets it through (decided before it is built)."""
        state = self._state(current, compactions)
        if self._throttle.should_emit(
            pressure(effective=current.effective, budget=self._budget, state=state), changed=changed
        ):
            self._emit(ContextMetricsEvent(snapshot=self.snapshot(phase, current, compactions)))
