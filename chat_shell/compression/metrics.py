"""Context metrics snapshots (SPEC 5.7): pure construction from the guard's running totals,
plus the throttle that decides which snapshots reach the event stream.

`used_input` is the effective estimate, and every one of its tokens is attributed to exactly
one source: local counts go to the source that owns them; the fixed per-request overhead the
provider adds (hidden prompt, tool scaffolding) goes to `system`; any remaining scale
correction is spread over the sources in proportion to their local counts.
"""

from __future__ import annotations

from collections.abc import Mapping

from chat_shell.compression.budget import Budget
from chat_shell.compression.calibration import Estimate
from chat_shell.contracts import BREAKDOWN_SOURCES, CompactionRecord, ContextMetrics, ContextState
from chat_shell.providers.profiles import ModelProfile

# Share of the trigger from which the context is reported as `warning`.
WARNING_SHARE = 0.9
THROTTLE_BUCKET_PERCENT = 5


def attribute(local_parts: Mapping[str, int], *, effective: int, fixed_overhead: int) -> dict[str, int]:
    """Split `effective` over the breakdown sources; the values sum to `effective` exactly."""
    local_by_source = {source: max(0, int(local_parts.get(source, 0))) for source in BREAKDOWN_SOURCES}
    parts = dict(local_by_source)
    local = sum(local_by_source.values())
    extra = max(0, effective - local)
    fixed = min(extra, max(0, fixed_overhead))
    parts["system"] += fixed
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
        parts["system"] += rest
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
    if effective >= WARNING_SHARE * budget.trigger:
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
        remaining_percent=round(100.0 * remaining / available, 1) if available else 0.0,
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


class MetricsThrottle:
    """Emit a snapshot only when something a reader would notice changed: the first one of a
    turn, a hook call that changed the view, a new state, a trigger crossing, or a move to
    another 5% bucket of the remaining input."""

    def __init__(self) -> None:
        self._last: ContextMetrics | None = None

    @staticmethod
    def _bucket(metrics: ContextMetrics) -> int:
        return int(metrics.remaining_percent // THROTTLE_BUCKET_PERCENT)

    def should_emit(self, metrics: ContextMetrics, *, changed: bool) -> bool:
        last = self._last
        emit = (
            last is None
            or changed
            or metrics.state != last.state
            or metrics.over_trigger != last.over_trigger
            or self._bucket(metrics) != self._bucket(last)
        )
        if emit:
            self._last = metrics
        return emit
