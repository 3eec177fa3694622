"""Percentiles from binned counts, so SQL returns a few grouped rows instead of sorted values.

SQL groups values into fixed bins (`bin_case`) and reports each bin's count, smallest and
largest value; `percentile` walks the bins to the nearest-rank position and interpolates
between that bin's observed extremes. Exact while a bin holds at most two values; otherwise
off by at most the spread of the values inside one bin (bins grow by about 1.5x).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import case
from sqlalchemy.sql import ColumnElement

# Upper bounds (exclusive) of the millisecond bins; the last bin is open-ended.
MS_BOUNDS: tuple[float, ...] = (
    10, 25, 50, 75, 100, 150, 200, 300, 400, 500, 750, 1_000, 1_500, 2_000, 3_000, 5_000,
    7_500, 10_000, 15_000, 20_000, 30_000, 60_000, 120_000,
)  # fmt: skip


@dataclass(frozen=True)
class Bin:
    index: int
    count: int
    low: float
    high: float


def bin_case(value: Any, bounds: Sequence[float] = MS_BOUNDS) -> ColumnElement[int]:
    """The bin index of `value` (SQL), NULL for NULL values."""
    return case(
        *[(value < bound, index) for index, bound in enumerate(bounds)],
        else_=case((value.is_(None), None), else_=len(bounds)),
    )


def merge(bins: Iterable[Bin]) -> list[Bin]:
    """Bins of several groups combined per index (counts added, extremes widened)."""
    merged: dict[int, Bin] = {}
    for item in bins:
        seen = merged.get(item.index)
        merged[item.index] = (
            item
            if seen is None
            else Bin(item.index, seen.count + item.count, min(seen.low, item.low), max(seen.high, item.high))
        )
    return [merged[index] for index in sorted(merged)]


def percentile(bins: Sequence[Bin], percent: float) -> float | None:
    """The nearest-rank `percent` percentile of the values counted in `bins` (sorted by index)."""
    total = sum(item.count for item in bins)
    if total == 0:
        return None
    rank = max(1, math.ceil(total * percent / 100))
    below = 0
    for item in bins:
        if below + item.count >= rank:
            if item.count == 1:
                return item.low
            position = (rank - below - 1) / (item.count - 1)
            return item.low + (item.high - item.low) * position
        below += item.count
    return bins[-1].high


def bin_index(value: float | None, bounds: Sequence[float] = MS_BOUNDS) -> int | None:
    """The bin `bin_case` gives `value`, computed in Python."""
    return None if value is None else bisect.bisect_right(bounds, value)
