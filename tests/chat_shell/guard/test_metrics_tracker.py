"""Context metrics snapshots: attribution of every token and the 5% throttle (SPEC 5.7)."""

from __future__ import annotations

from chat_shell.accounting.budget import budget_for
from chat_shell.accounting.calibration import Fit, Reported, estimate
from chat_shell.contracts import BREAKDOWN_SOURCES, ContextMetrics, ContextState
from chat_shell.guard.metrics_tracker import MetricsThrottle, Pressure, attribute, pressure, snapshot
from chat_shell.providers.profiles import resolve_profile

LOCAL = {"system": 1_500, "tool_schemas": 700, "history": 20_001, "tool_outputs": 33_333, "current_input": 17}


def test_every_token_of_the_effective_estimate_is_attributed_once() -> None:
    local = sum(LOCAL.values())
    for effective, fixed in [
        (local, 0),
        (local + 4_000, 4_000),
        (local * 2 + 11_066, 11_066),
        (local + 7, 3),
    ]:
        parts = attribute(LOCAL, effective=effective, fixed_overhead=fixed)
        assert set(parts) == set(BREAKDOWN_SOURCES)
        assert sum(parts.values()) == effective
        assert all(parts[s] >= LOCAL.get(s, 0) for s in BREAKDOWN_SOURCES)


def test_fixed_overhead_is_its_own_source_and_scale_is_spread_by_share() -> None:
    parts = attribute(
        {"history": 1_000, "tool_outputs": 3_000}, effective=4_000 + 11_000 + 4_000, fixed_overhead=11_000
    )
    # With no system prompt configured, none of the provider's overhead is called one.
    assert parts["overhead"] == 11_000 and parts["system"] == 0
    assert parts["history"] == 2_000 and parts["tool_outputs"] == 6_000


def _snapshot(used_local: int) -> ContextMetrics:
    profile = resolve_profile("gpt-4o")
    budget = budget_for(profile)
    current = estimate(used_local, overhead_tokens=4_000, fit=Fit(4_000.0, 1.0, 0, False), reported=None)
    return snapshot(
        phase="mid_turn",
        profile=profile,
        budget=budget,
        estimate=current,
        local_parts={"history": used_local},
        state="normal",
        latest_compaction=None,
    )


def test_a_snapshot_reports_the_budget_and_remaining_input() -> None:
    metrics = _snapshot(50_000)
    assert metrics.used_input == 54_000
    assert metrics.available_input == 112_000
    assert metrics.remaining == 58_000
    assert metrics.remaining_percent == 51.8
    assert metrics.over_trigger is False
    assert metrics.estimate_source == "configured"
    assert metrics.profile_source == "builtin"
    assert sum(metrics.breakdown.values()) == metrics.used_input
    assert metrics.calibration["fitted"] is False


def test_unknown_models_are_labelled_default() -> None:
    profile = resolve_profile("my-private-model")
    metrics = snapshot(
        phase="final",
        profile=profile,
        budget=budget_for(profile),
        estimate=estimate(
            10, overhead_tokens=4_000, fit=Fit(4_000.0, 1.0, 0, False), reported=Reported(20, 0)
        ),
        local_parts={"history": 10},
        state="normal",
        latest_compaction=None,
    )
    assert metrics.profile_source == "default"
    assert metrics.estimate_source == "configured"


def test_the_throttle_emits_on_5_percent_buckets_crossings_and_changes() -> None:
    budget = budget_for(resolve_profile("gpt-4o"))  # available 112,000, trigger 95,200

    def at(used: int, state: ContextState = "normal") -> Pressure:
        return pressure(effective=used, budget=budget, state=state)

    throttle = MetricsThrottle()
    assert throttle.should_emit(at(14_000), changed=False)  # the first one
    assert not throttle.should_emit(at(14_500), changed=False)  # same 5% bucket
    assert not throttle.should_emit(at(15_000), changed=False)
    assert throttle.should_emit(at(15_000), changed=True)  # the guard changed the view
    assert throttle.should_emit(at(20_000), changed=False)  # next bucket
    assert not throttle.should_emit(at(20_100), changed=False)
    assert at(99_000).over_trigger and at(99_000).bucket == at(100_000).bucket
    assert throttle.should_emit(at(99_000), changed=False)  # a trigger crossing
    assert throttle.should_emit(at(99_010, "warning"), changed=False)  # a new state
    assert not throttle.should_emit(at(99_010, "warning"), changed=False)
    assert throttle.should_emit(at(20_000), changed=False)  # back down a bucket
