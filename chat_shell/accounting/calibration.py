"""Calibration of local counts against provider usage, and the effective estimate (SPEC 4).

Each successful model call yields a sample `(local tokens of the request as sent, provider
input tokens)`. A least-squares line `provider ≈ fixed_overhead + scale × local` over the last
samples of the same profile separates the fixed cost the provider adds (hidden system prompt,
tool scaffolding) from the tokenizer's scale. A ratio `provider / local` would not: a short
conversation with 18 local tokens and 11,136 provider tokens is a 600× "scale" that would
refuse every normal request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MAX_SAMPLES = 20
MIN_SAMPLES = 2
MIN_LOCAL_SPREAD = 1_000
SCALE_MIN = 1.0
SCALE_MAX = 4.0

EstimateSource = Literal["configured", "calibrated", "reported"]


@dataclass(frozen=True)
class Sample:
    local: int
    provider: int


@dataclass(frozen=True)
class Fit:
    fixed_overhead: float
    scale: float
    samples: int
    fitted: bool

    def predict(self, local: int) -> int:
        return math.ceil(self.fixed_overhead + self.scale * local)


def fit(samples: Sequence[Sample], configured_overhead: int) -> Fit:
    """Least squares over the last `MAX_SAMPLES` samples, with the SPEC's guards: fewer than
    two samples or a local spread under 1,000 tokens give no fit (scale 1, configured
    overhead); the scale is clamped to [1, 4] and the overhead is never negative."""
    recent = list(samples)[-MAX_SAMPLES:]
    locals_ = [s.local for s in recent]
    if len(recent) < MIN_SAMPLES or max(locals_) - min(locals_) < MIN_LOCAL_SPREAD:
        return Fit(float(configured_overhead), 1.0, len(recent), fitted=False)
    n = len(recent)
    mean_local = sum(locals_) / n
    mean_provider = sum(s.provider for s in recent) / n
    covariance = sum((s.local - mean_local) * (s.provider - mean_provider) for s in recent)
    variance = sum((s.local - mean_local) ** 2 for s in recent)
    scale = min(max(covariance / variance, SCALE_MIN), SCALE_MAX)
    # With the slope fixed (possibly clamped), the best intercept is the mean residual.
    overhead = max(0.0, mean_provider - scale * mean_local)
    return Fit(overhead, scale, n, fitted=True)


@dataclass(frozen=True)
class Reported:
    """The latest provider input, and the local tokens added to the view since that request."""

    provider_input: int
    added_local: int

    @property
    def tokens(self) -> int:
        return self.provider_input + self.added_local


@dataclass(frozen=True)
class Estimate:
    local: int
    configured: int
    calibrated: int
    reported: int | None
    effective: int
    source: EstimateSource
    fit: Fit

    @property
    def fixed_overhead(self) -> int:
        """The part of the estimate that is fixed per request rather than per message."""
        return math.ceil(self.fit.fixed_overhead)


def estimate(local: int, *, overhead_tokens: int, fit: Fit, reported: Reported | None) -> Estimate:
    """`effective = max(configured, calibrated, reported)`; ties go to the better informed."""
    configured = local + overhead_tokens
    calibrated = fit.predict(local) if fit.fitted else configured
    candidates: list[tuple[int, int, EstimateSource]] = [(configured, 0, "configured")]
    if fit.fitted:
        candidates.append((calibrated, 1, "calibrated"))
    if reported is not None:
        candidates.append((reported.tokens, 2, "reported"))
    effective, _, source = max(candidates)
    return Estimate(
        local=local,
        configured=configured,
        calibrated=calibrated,
        reported=reported.tokens if reported is not None else None,
        effective=effective,
        source=source,
        fit=fit,
    )
