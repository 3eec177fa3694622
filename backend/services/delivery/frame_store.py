"""Text frames straight to the database driver (issue 18).

Text frames are most of the event log's commits and carry no hook: a plain insert of finished
rows. Through SQLAlchemy's Core each cost about 420 µs of CPU on SQLite and 250-430 µs on
PostgreSQL (a pool checkout with its ping, the execution context, events, the transaction's
round trips); on the driver, through one connection held between commits, about 95 µs and
60 µs. The statement and the conversion of each value still come from the table and its
column types, compiled once for the engine's dialect, so a frame's row is the row the ORM
path writes.

On PostgreSQL one insert is one round trip (asyncpg commits a lone statement itself, and its
`executemany` is atomic). On SQLite the insert and its commit hold the process's write gate
(`backend.db.write_gate`), as every other writer's transaction does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, cast

from sqlalchemy import Table, insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from backend.db import write_gate
from backend.models import TurnEvent
from backend.models.base import utcnow

# A connection held this long without a commit is given back before the next: one the server
# dropped while idle (a restart, an idle timeout) is then replaced after the pool's ping.
HELD_IDLE_SECONDS = 5.0
# The columns a frame's row sets, in the order of its values (`id` is the database's).
_COLUMNS = ("turn_id", "seq", "event", "data", "created_at")

Row = tuple[int, int, str, dict[str, Any]]


def _unchanged(value: Any) -> Any:
    return value


class FrameStore:
    """Writes rows of `turn_events` (turn id, seq, event, data) in one transaction each call."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        dialect = engine.dialect
        table = cast(Table, TurnEvent.__table__)  # a declarative class's table; typed as FromClause
        # `inline`: nothing is read back (no RETURNING of the new id).
        compiled = insert(table).inline().compile(dialect=dialect, column_keys=list(_COLUMNS))
        assert tuple(compiled.positiontup or ()) == _COLUMNS, compiled.positiontup
        self._sql = str(compiled)
        types = [table.c[name].type.dialect_impl(dialect) for name in _COLUMNS]
        self._convert: list[Callable[[Any], Any]] = [t.bind_processor(dialect) or _unchanged for t in types]
        self._sqlite = dialect.name == "sqlite"
        self._gate = write_gate(engine)
        self._held: AsyncConnection | None = None
        self._driver: Any = None  # the held connection's aiosqlite or asyncpg connection
        self._used_at = 0.0

    async def write(self, rows: Sequence[Row]) -> None:
        now = utcnow()
        convert = self._convert
        values = [tuple(to(value) for to, value in zip(convert, (*row, now), strict=True)) for row in rows]
        connection = await self._connection()
        if self._gate is not None:
            await self._gate.acquire()
        try:
            await self._insert(values)
        except BaseException:
            # Broken or still in its transaction: the pool discards it, the next write connects.
            self._held = None
            await connection.invalidate()
            raise
        finally:
            if self._gate is not None:
                self._gate.release()
        self._used_at = asyncio.get_running_loop().time()

    async def _connection(self) -> AsyncConnection:
        if self._held is not None and asyncio.get_running_loop().time() - self._used_at > HELD_IDLE_SECONDS:
            await self.release()
        if self._held is None:
            self._held = await self._engine.connect()
            self._driver = (await self._held.get_raw_connection()).driver_connection
        return self._held

    async def _insert(self, values: list[tuple[Any, ...]]) -> None:
        if self._sqlite:  # aiosqlite: the insert opens a transaction, which commits here
            await self._driver.executemany(self._sql, values)
            await self._driver.commit()
        elif len(values) == 1:  # asyncpg: a lone statement commits itself
            await self._driver.execute(self._sql, *values[0])
        else:
            await self._driver.executemany(self._sql, values)

    async def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            await held.close()
