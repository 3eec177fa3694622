"""Percentiles from binned counts (the dashboard's TTFT and compaction-duration percentiles)."""

from __future__ import annotations

import bisect
import math

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Float, create_engine, literal, select

from backend.services.dashboard.percentiles import MS_BOUNDS, Bin, bin_case, bin_index, merge, percentile


def binned(values: list[float]) -> list[Bin]:
    """What the SQL grouping returns: per bin index, the count and the observed extremes."""
    groups: dict[int, list[float]] = {}
    for value in values:
        groups.setdefault(bisect.bisect_right(MS_BOUNDS, value), []).append(value)
    return [Bin(index, len(v), min(v), max(v)) for index, v in sorted(groups.items())]


def nearest_rank(values: list[float], percent: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(len(ordered) * percent / 100)) - 1]


def test_no_values_have_no_percentile() -> None:
    assert percentile([], 50) is None


def test_values_alone_in_their_bins_give_the_exact_nearest_rank() -> None:
    values = [800.0, 1_200.0, 3_000.0]
    assert percentile(binned(values), 50) == 1_200.0
    assert percentile(binned(values), 95) == 3_000.0
    assert percentile(binned([42.0]), 95) == 42.0


@given(
    st.lists(st.floats(min_value=0.1, max_value=200_000), min_size=1, max_size=300), st.sampled_from([50, 95])
)
def test_the_estimate_stays_within_the_bin_of_the_true_percentile(values: list[float], percent: int) -> None:
    bins = binned(values)
    estimate = percentile(bins, percent)
    exact = nearest_rank(values, percent)
    (home,) = [b for b in bins if b.low <= exact <= b.high]
    assert estimate is not None and home.low <= estimate <= home.high
    if home.count <= 2:
        assert estimate == exact


def test_merging_groups_adds_counts_and_widens_extremes() -> None:
    merged = merge([Bin(3, 2, 60.0, 70.0), Bin(1, 1, 20.0, 20.0), Bin(3, 1, 55.0, 55.0)])
    assert merged == [Bin(1, 1, 20.0, 20.0), Bin(3, 3, 55.0, 70.0)]


def test_the_rollups_bin_a_value_where_the_sql_grouping_does() -> None:
    """Rollups bin values in Python as they are written; the raw queries bin them in SQL."""
    values = [None, 0.0, 9.999, *MS_BOUNDS, *(bound - 0.5 for bound in MS_BOUNDS), 10**7]
    with create_engine("sqlite://").connect() as connection:
        in_sql = [connection.scalar(select(bin_case(literal(value, Float)))) for value in values]
    assert [bin_index(value) for value in values] == in_sql
