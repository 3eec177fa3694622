"""The operators' dashboard data: SQL aggregates over stored turns and compactions, on SQLite
and PostgreSQL, and who may see them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from alembic import command
from sqlalchemy import select

from backend.app import create_app
from backend.db import alembic_config, create_engine, session_factory, transaction
from backend.models import Conversation, TurnStatus, User
from backend.models.base import utcnow
from backend.services.dashboard import aggregates, rollups
from backend.services.dashboard.windows import Window
from backend.services.delivery import turn_endings, turns
from backend.settings import Settings
from chat_shell.contracts import ContextMetrics, TurnResult
from tests.support.api import new_operator, new_user
from tests.support.dashboard import StoredCompaction, StoredTurn, snapshot, store_metrics
from tests.support.servers import serve


async def _seed(database_url: str, owner: str) -> dict[str, int]:
    now = utcnow()
    ago = lambda minutes: now - timedelta(minutes=minutes)  # noqa: E731
    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as db, db.begin():
            hot = await store_metrics(
                db,
                owner,
                [
                    StoredTurn(ago(50), used=3_000, ttft_ms=100),
                    StoredTurn(ago(30), used=5_000, ttft_ms=200),
                    StoredTurn(ago(5), used=6_800, ttft_ms=300, overflow_errors=1),
                ],
                [
                    StoredCompaction(ago(29), duration_ms=800, retention=0.8),
                    StoredCompaction(ago(6), duration_ms=1_200, retention=0.9),
                    StoredCompaction(
                        ago(4), status="fallback", duration_ms=3_000, retention=None, failure_reason="timeout"
                    ),
                ],
            )
            calm = await store_metrics(
                db,
                owner,
                [
                    StoredTurn(ago(20), used=1_000, ttft_ms=150),
                    StoredTurn(
                        ago(10),
                        used=1_400,
                        ttft_ms=250,
                        refused=True,
                        status="failed",
                        reason="context_refused",
                    ),
                ],
            )
            old = await store_metrics(db, owner, [StoredTurn(ago(180), used=6_900, ttft_ms=90)])
    finally:
        await engine.dispose()
    return {"hot": hot, "calm": calm, "old": old}


@pytest.fixture
async def operator(server: str, database_url: str) -> httpx.AsyncClient:
    client = await new_operator(server, database_url, "operator")
    yield client
    await client.aclose()


async def test_the_summary_aggregates_the_window_in_sql(
    operator: httpx.AsyncClient, alice: httpx.AsyncClient, database_url: str
) -> None:
    ids = await _seed(database_url, "alice")
    body = (await operator.get("/api/metrics/summary", params={"window": "1h"})).json()

    totals = body["totals"]
    assert totals["turns"] == 5 and totals["refusals"] == 1 and totals["failed_turns"] == 1
    assert totals["overflow_errors"] == 1
    assert totals["compactions"] == 3 and totals["compactions_completed"] == 2
    assert totals["compaction_success_rate"] == pytest.approx(2 / 3)
    assert totals["tokens_saved"] == 8_000
    assert (totals["compaction_duration_p50_ms"], totals["compaction_duration_p95_ms"]) == (1_200, 3_000)
    assert (totals["ttft_p50_ms"], totals["ttft_p95_ms"]) == (200, 300)
    assert totals["retention_avg"] == pytest.approx(0.85)
    assert totals["utilization_max"] == pytest.approx(6_800 / 7_000)

    assert body["window"]["bucket_seconds"] == 60 and len(body["turns"]) == 60
    assert sum(point.get("turns", 0) for point in body["turns"]) == 5
    assert sum(point.get("refusals", 0) for point in body["turns"]) == 1
    assert sum(point.get("completed", 0) for point in body["compactions"]) == 2
    assert sum(point.get("fallback", 0) for point in body["compactions"]) == 1
    assert sum(point.get("tokens_saved", 0) for point in body["compactions"]) == 8_000
    scored = [p["retention_avg"] for p in body["compactions"] if p.get("retention_avg") is not None]
    assert sorted(scored) == pytest.approx([0.8, 0.9])
    busy = [point for point in body["turns"] if point["turns"]]
    assert len(busy) == 5 and all(point["ttft_p50_ms"] is not None for point in busy)
    assert set(body["turns"][0]) == set(busy[0])  # empty buckets have every key

    pressure = body["pressure"]
    assert [row["conversation_id"] for row in pressure] == [ids["hot"], ids["calm"]]
    hot = pressure[0]
    assert hot["used_input"] == 6_800 and hot["utilization"] == pytest.approx(6_800 / 7_000)
    assert (hot["turns"], hot["compactions"], hot["compactions_completed"]) == (3, 3, 2)
    assert pressure[1]["refusals"] == 1

    wider = (await operator.get("/api/metrics/summary", params={"window": "6h"})).json()
    assert wider["pressure"][0]["conversation_id"] == ids["old"]
    assert wider["totals"]["turns"] == 6


async def test_a_conversation_drill_down_has_its_snapshot_turns_and_compactions(
    operator: httpx.AsyncClient, alice: httpx.AsyncClient, database_url: str
) -> None:
    ids = await _seed(database_url, "alice")
    detail = (await operator.get(f"/api/metrics/conversations/{ids['hot']}")).json()
    assert detail["latest_snapshot"]["used_input"] == 6_800
    assert [t["used_input"] for t in detail["turns"]] == [3_000, 5_000, 6_800]
    assert [c["status"] for c in detail["compactions"]] == ["fallback", "completed", "completed"]
    assert detail["compactions"][0]["failure_reason"] == "timeout"
    assert "title" not in detail
    missing = await operator.get("/api/metrics/conversations/999999")
    assert missing.status_code == 404


async def test_an_empty_window_has_empty_series_and_no_rates(operator: httpx.AsyncClient) -> None:
    body = (await operator.get("/api/metrics/summary", params={"window": "7d"})).json()
    assert body["totals"]["turns"] == 0 and body["totals"]["compaction_success_rate"] is None
    assert len(body["turns"]) == 84 and body["pressure"] == []


async def test_the_dashboard_and_its_data_are_for_operators_only(
    server: str, operator: httpx.AsyncClient, bob: httpx.AsyncClient, anonymous: httpx.AsyncClient
) -> None:
    denied = await bob.get("/api/metrics/summary")
    assert denied.status_code == 403 and denied.json()["code"] == "operator_only"
    assert (await bob.get("/api/metrics/conversations/1")).status_code == 403
    assert (await anonymous.get("/api/metrics/summary")).status_code == 401
    assert (await bob.get("/operators")).status_code == 404
    redirect = await anonymous.get("/operators")
    assert redirect.status_code == 303 and redirect.headers["location"].startswith("/login")
    page = await operator.get("/operators")
    assert page.status_code == 200 and 'id="dashboard"' in page.text
    bad = await operator.get("/api/metrics/summary", params={"window": "2y"})
    assert bad.status_code == 422


async def test_the_operator_flag_adds_the_dashboard_link(operator: httpx.AsyncClient, server: str) -> None:
    assert 'href="/operators"' in (await operator.get("/")).text
    plain = await new_user(server, "plain")
    try:
        assert 'href="/operators"' not in (await plain.get("/")).text
    finally:
        await plain.aclose()


# -- whole-hour windows read the hourly rollups ------------------------------------------------

# Mid-hour, so the 24-hour window (raw rows) and the 7-day one (rollups) cut at different times.
NOW = datetime(2026, 11, 30, 10, 37, 12, 345_000, tzinfo=utcnow().tzinfo)


async def _store(database_url: str, *batches: tuple[list[StoredTurn], list[StoredCompaction]]) -> None:
    """Stores alice's turns and compactions, all batches in one transaction."""
    engine = create_engine(database_url)
    try:
        async with transaction(session_factory(engine)) as db:
            for stored, compactions in batches:
                await store_metrics(db, "alice", stored, compactions)
    finally:
        await engine.dispose()


def _comparable(body: dict[str, Any]) -> dict[str, Any]:
    """What both windows must agree on when every figure lies inside both."""
    return {
        "totals": body["totals"],
        "strategies": body["compactions_by_strategy"],
        "pressure": body["pressure"],
    }


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        if isinstance(value, dict):
            _assert_same(value, b[key])
        elif isinstance(value, list):
            assert len(value) == len(b[key])
            for x, y in zip(value, b[key], strict=True):
                _assert_same(x, y)
        elif isinstance(value, float):
            assert value == pytest.approx(b[key]), key
        else:
            assert value == b[key], key


def _spread_turns() -> tuple[list[StoredTurn], list[StoredCompaction]]:
    """Turns and compactions over the last 20 hours, several to an hour, of two profiles."""
    stored, compactions = [], []
    for index in range(60):
        at = NOW - timedelta(minutes=20 * (59 - index) + 1)
        refused = index % 11 == 0
        stored.append(
            StoredTurn(
                at,
                used=1_000 + 97 * index,
                available=6_000 if index % 2 else 7_000,
                ttft_ms=None if index % 9 == 0 else 40.0 + 37 * (index % 13) * (index % 5),
                refused=refused,
                overflow_errors=int(index % 17 == 0),
                status="failed" if refused else "completed",
                reason="context_refused" if refused else "normal_completion",
                profile="gpt-4o" if index % 3 else "gpt-4o-mini",
            )
        )
        if index % 4 == 0:
            compactions.append(
                StoredCompaction(
                    at,
                    strategy="summary_compact" if index % 8 else "tool_trim",
                    status="fallback" if index % 12 == 0 else "completed",
                    before=6_000 + index,
                    after=2_000,
                    duration_ms=300.0 + 111 * (index % 7),
                    retention=None if index % 8 == 0 else 0.5 + index / 200,
                )
            )
    return stored, compactions


async def _summaries(database_url: str, *windows: str) -> list[dict[str, Any]]:
    engine = create_engine(database_url)
    try:
        sessions = session_factory(engine)
        return [(await aggregates.summary(sessions, window, NOW)).model_dump() for window in windows]
    finally:
        await engine.dispose()


async def test_whole_hour_windows_show_the_figures_of_the_raw_rows(
    alice: httpx.AsyncClient, database_url: str
) -> None:
    week_start = Window.ending_now("7d", NOW).start
    await _store(database_url, _spread_turns())

    day, week, month = await _summaries(database_url, "24h", "7d", "30d")
    assert day["totals"]["turns"] == 60 and day["totals"]["compactions"] == 15
    assert len(day["pressure"]) == 1
    _assert_same(_comparable(day), _comparable(week))
    _assert_same(_comparable(day), _comparable(month))
    assert sum(point["turns"] for point in week["turns"]) == 60
    for series, key in (("turns", "refusals"), ("compactions", "fallback"), ("compactions", "tokens_saved")):
        assert sum(p[key] for p in week[series]) == sum(p[key] for p in day[series]) > 0

    # The edges of the 7-day window: its first instant counts, the one before does not.
    before = week_start - timedelta(microseconds=1)
    await _store(
        database_url,
        ([StoredTurn(before, used=6_999, ttft_ms=5)], [StoredCompaction(before)]),
        (
            [StoredTurn(week_start, used=100, ttft_ms=90_000, status="failed")],
            [StoredCompaction(week_start, duration_ms=50_000, retention=0.1)],
        ),
    )
    (week,) = await _summaries(database_url, "7d")
    totals = week["totals"]
    assert (totals["turns"], totals["failed_turns"], totals["compactions"]) == (
        61,
        1 + day["totals"]["failed_turns"],
        16,
    )
    assert totals["ttft_p95_ms"] > day["totals"]["ttft_p95_ms"]
    assert week["turns"][0]["turns"] == 1 and week["turns"][0]["ttft_p50_ms"] == 90_000
    assert week["compactions"][0]["retention_min"] == pytest.approx(0.1)
    assert totals["utilization_max"] == day["totals"]["utilization_max"]
    assert [row["used_input"] for row in week["pressure"]] == [day["pressure"][0]["used_input"], 100]


async def test_turns_count_in_the_rollups_when_they_start_and_finish(
    alice: httpx.AsyncClient, database_url: str
) -> None:
    """Through the service's own path: a running turn counts at once; two turns finishing at
    the same time in the same hour both land; the rollups then agree with the raw rows."""
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    try:
        started = []
        async with sessions() as db, db.begin():
            owner = await db.scalar(select(User).where(User.username == "alice"))
            assert owner is not None
            for _ in range(2):
                cid = await store_metrics(db, "alice", [])
                conversation = await db.get(Conversation, cid)
                assert conversation is not None
                started.append(await turns.start_turn(db, owner, conversation, "hi", [], "gpt-4o"))
        now = utcnow()
        day, week = [(await aggregates.summary(sessions, w, now)).model_dump() for w in ("24h", "7d")]
        assert day["totals"]["turns"] == week["totals"]["turns"] == 2
        assert week["totals"]["running_turns"] == 2 and week["totals"]["ttft_p50_ms"] is None

        async def finish(index: int) -> None:
            result = TurnResult(
                value="ok",
                termination_reason="normal_completion",
                ttft_ms=100.0 + 50 * index,
                overflow_errors=index,
                context_metrics=ContextMetrics.model_validate(snapshot(3_500 + 1_000 * index, 7_000)),
            )
            async with sessions() as db, db.begin():
                await turn_endings.finish_turn(
                    db, started[index], TurnStatus.COMPLETED, result, None, utcnow(), 1
                )
                await rollups.write_staged(db)

        await asyncio.gather(finish(0), finish(1))
        day, week = [(await aggregates.summary(sessions, w, now)).model_dump() for w in ("24h", "7d")]
        _assert_same(_comparable(day), _comparable(week))
        totals = week["totals"]
        assert (totals["turns"], totals["running_turns"], totals["overflow_errors"]) == (2, 0, 1)
        assert (totals["ttft_p50_ms"], totals["ttft_p95_ms"]) == (100.0, 150.0)
        assert totals["utilization_max"] == pytest.approx(4_500 / 7_000)
    finally:
        await engine.dispose()


async def test_the_migration_fills_the_rollups_from_stored_rows(
    database_url: str, make_settings: Callable[..., Settings]
) -> None:
    # The downgrade drops the queue's tables: no app (and no worker of one) may run during it.
    async with serve(create_app(make_settings(database_url, worker_in_process=False))) as base_url:
        await (await new_user(base_url, "alice")).aclose()
    await _store(database_url, _spread_turns())
    kept = await _summaries(database_url, "7d", "30d")

    def remigrate() -> None:
        command.downgrade(alembic_config(database_url), "0004")
        command.upgrade(alembic_config(database_url), "head")

    await asyncio.to_thread(remigrate)
    for before, after in zip(kept, await _summaries(database_url, "7d", "30d"), strict=True):
        _assert_same(before, after)
