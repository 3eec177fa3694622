"""The operators' dashboard data: SQL aggregates over stored turns and compactions, on SQLite
and PostgreSQL, and who may see them."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from backend.db import create_engine, session_factory
from backend.models.base import utcnow
from tests.support.api import new_operator, new_user
from tests.support.dashboard import StoredCompaction, StoredTurn, store_metrics


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
