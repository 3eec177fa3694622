"""The dashboard's time windows and their buckets, in Python and in SQL."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import Float, Integer, cast, func, type_coerce
from sqlalchemy.sql import ColumnElement

from backend.models.base import utcnow

WindowName = Literal["1h", "6h", "24h", "7d", "30d"]
# Window -> (length, bucket width): 60 to 120 points per chart.
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "1h": (timedelta(hours=1), timedelta(minutes=1)),
    "6h": (timedelta(hours=6), timedelta(minutes=5)),
    "24h": (timedelta(hours=24), timedelta(minutes=15)),
    "7d": (timedelta(days=7), timedelta(hours=2)),
    "30d": (timedelta(days=30), timedelta(hours=6)),
}
HOUR = timedelta(hours=1)


def hour_of(moment: datetime) -> int:
    """Whole hours since the Unix epoch (UTC), the rollups' time key."""
    return int(moment.timestamp() // 3600)


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    bucket: timedelta

    @classmethod
    def ending_now(cls, name: str, now: datetime | None = None) -> Window:
        length, bucket = WINDOWS[name]
        now = now or utcnow()
        width = bucket.total_seconds()
        # Buckets aligned to whole multiples of their width, the last one holding `now`.
        last = datetime.fromtimestamp((now.timestamp() // width) * width, tz=now.tzinfo)
        count = int(length / bucket)
        return cls(last - bucket * (count - 1), now, bucket)

    @property
    def whole_hours(self) -> bool:
        """Whether buckets (and so the start) fall on whole hours: the rollups can answer."""
        return self.bucket % HOUR == timedelta(0)

    @property
    def start_hour(self) -> int:
        return hour_of(self.start)

    @property
    def bucket_hours(self) -> int:
        return int(self.bucket / HOUR)

    @property
    def count(self) -> int:
        return int((self.end - self.start) / self.bucket) + 1

    def starts(self) -> list[datetime]:
        return [self.start + self.bucket * i for i in range(self.count)]

    def bucket_of(self, column: Any, dialect: str) -> ColumnElement[int]:
        """The index of the bucket a timestamp column falls in (SQL)."""
        offset = (_epoch(column, dialect) - self.start.timestamp()) / self.bucket.total_seconds()
        return cast(func.floor(offset), Integer) if dialect != "sqlite" else cast(offset, Integer)

    def hour_bucket_of(self, hour: Any) -> ColumnElement[int]:
        """The index of the bucket a rollup hour falls in (SQL; whole-hour windows)."""
        return (hour - self.start_hour) // self.bucket_hours


def _epoch(column: Any, dialect: str) -> ColumnElement[float]:
    if dialect == "sqlite":
        # Stored as UTC text; julianday reads it (and uses no index, so filters stay on the column).
        return (func.julianday(column) - 2440587.5) * 86400.0
    # Fractional seconds on PostgreSQL; type_coerce only tells SQLAlchemy so (the SQL is unchanged).
    return type_coerce(func.extract("epoch", column), Float)


def ratio(used: Any, available: Any) -> ColumnElement[float | Decimal]:
    """used / available in SQL, NULL where nothing is available."""
    return cast(used, Float) / func.nullif(available, 0)


def utilization(used: int | None, available: int | None) -> float | None:
    """used / available in Python, as `ratio` computes it in SQL."""
    return used / available if used is not None and available else None
