"""Calibration against provider usage and the effective estimate (SPEC 4)."""

from __future__ import annotations

import random

from chat_shell.accounting.calibration import Fit, Reported, Sample, estimate, fit

SEED_SHORT = [Sample(18, 11_136), Sample(46, 11_167), Sample(80, 11_199)]


def test_the_seeds_short_samples_alone_give_no_fit_and_never_a_600x_scale() -> None:
    result = fit(SEED_SHORT, configured_overhead=4_000)
    assert not result.fitted
    assert result.scale == 1.0
    assert result.fixed_overhead == 4_000
    assert result.predict(80) == 4_080  # the ratio 11,136 / 18 would have said 618 x


def test_long_samples_added_to_the_seed_predict_a_longer_request_within_one_percent() -> None:
    rng = random.Random(5)

    def provider(local: int) -> int:
        return round((11_066 + 1.7479 * local) * (1 + rng.uniform(-0.0005, 0.0005)))

    samples = [*SEED_SHORT, Sample(20_000, provider(20_000)), Sample(40_000, provider(40_000))]
    result = fit(samples, configured_overhead=4_000)
    assert result.fitted
    truth = 11_066 + 1.7479 * 30_000
    assert abs(result.predict(30_000) - truth) / truth < 0.01
    assert 1.7 < result.scale < 1.8
    assert 10_500 < result.fixed_overhead < 11_600


def test_one_sample_or_a_narrow_spread_gives_no_fit() -> None:
    assert not fit([Sample(5_000, 9_000)], configured_overhead=4_000).fitted
    assert not fit([Sample(5_000, 9_000), Sample(5_999, 11_000)], configured_overhead=4_000).fitted
    assert fit([Sample(5_000, 9_000), Sample(6_000, 11_000)], configured_overhead=4_000).fitted


def test_the_scale_is_clamped_to_one_to_four_and_the_overhead_is_never_negative() -> None:
    steep = fit([Sample(1_000, 10_000), Sample(3_000, 30_000)], configured_overhead=4_000)
    assert steep.scale == 4.0
    assert steep.fixed_overhead == 20_000 - 4.0 * 2_000  # best intercept for the clamped slope
    flat = fit([Sample(1_000, 5_000), Sample(5_000, 6_000)], configured_overhead=4_000)
    assert flat.scale == 1.0
    negative = fit([Sample(10_000, 10_000), Sample(20_000, 30_000)], configured_overhead=4_000)
    assert negative.scale == 2.0
    assert negative.fixed_overhead == 0.0


def test_only_the_last_twenty_samples_count() -> None:
    stale = [Sample(1_000 * i, 50_000 + 3_000 * i) for i in range(1, 6)]
    recent = [Sample(1_000 * i, 2_000 + 2 * 1_000 * i) for i in range(1, 21)]
    result = fit(stale + recent, configured_overhead=4_000)
    assert result.samples == 20
    assert abs(result.scale - 2.0) < 1e-9
    assert abs(result.fixed_overhead - 2_000) < 1e-6


def test_the_effective_estimate_is_the_largest_signal() -> None:
    no_fit = Fit(4_000.0, 1.0, 0, fitted=False)
    plain = estimate(10_000, overhead_tokens=4_000, fit=no_fit, reported=None)
    assert (plain.configured, plain.calibrated, plain.reported) == (14_000, 14_000, None)
    assert (plain.effective, plain.source) == (14_000, "configured")

    fitted = Fit(11_066.0, 1.7479, 5, fitted=True)
    calibrated = estimate(10_000, overhead_tokens=4_000, fit=fitted, reported=None)
    assert calibrated.source == "calibrated"
    assert calibrated.effective == 11_066 + 17_479

    reported = estimate(10_000, overhead_tokens=4_000, fit=fitted, reported=Reported(30_000, 500))
    assert (reported.effective, reported.source) == (30_500, "reported")
    low_report = estimate(10_000, overhead_tokens=4_000, fit=fitted, reported=Reported(9_000, 0))
    assert low_report.source == "calibrated"  # a report never lowers the estimate
