"""The operators' dashboard in Chromium: charts over scripted turns, the drill-down, the
window picker, and the 404 other accounts get.

Turns run through the real stack against the scripted provider (utilisation, time to first
token, refusals and overflow errors come from them; the overflowing turn's forced compaction
finds nothing to summarize and records a fallback). Compactions at chosen sizes and times are
stored directly besides, as the backend writes them when a compaction event arrives.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import func, select

from backend.db import create_engine, session_factory
from backend.models import CompactionEvent
from backend.models.base import utcnow
from tests.frontend.actions import start
from tests.frontend.conftest import screenshot
from tests.support.api import make_operator
from tests.support.browser import Stack, run_off_loop
from tests.support.dashboard import StoredCompaction, StoredTurn, store_metrics
from tests.support.scripted_provider import text
from tests.support.texts import log_text

pytestmark = pytest.mark.browser

CHARTS = (
    "chart-utilization",
    "chart-compactions",
    "chart-saved",
    "chart-duration",
    "chart-errors",
    "chart-ttft",
    "chart-retention",
)


async def _store_compactions(database_url: str, username: str, now: datetime) -> int:
    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as db, db.begin():
            return await store_metrics(
                db,
                username,
                [StoredTurn(now - timedelta(minutes=3), used=6_900, available=7_000)],
                [
                    StoredCompaction(now - timedelta(minutes=9), duration_ms=700, retention=0.82),
                    StoredCompaction(now - timedelta(minutes=4), duration_ms=1_900, retention=0.95),
                    StoredCompaction(
                        now - timedelta(minutes=2),
                        status="fallback",
                        retention=None,
                        failure_reason="timeout",
                    ),
                ],
            )
    finally:
        await engine.dispose()


async def _success_rate(database_url: str) -> str:
    """The share of completed compactions among every stored one, as the tile rounds it (the
    browser tests share one database, so earlier tests' compactions count too)."""
    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as db:
            completed, attempts = (
                await db.execute(
                    select(func.count().filter(CompactionEvent.status == "completed"), func.count())
                )
            ).one()
    finally:
        await engine.dispose()
    return _percent(completed / attempts)


def _send(client, conversation_id: int, content: str) -> dict:  # type: ignore[no-untyped-def]
    response = client.post(
        f"/api/conversations/{conversation_id}/messages", json={"content": content}, params={"wait": "true"}
    )
    assert response.status_code == 200, response.text
    return response.json()


def _percent(value: float) -> str:
    return f"{math.floor(100 * value + 0.5)}%"  # Math.round, as the page rounds


def _hover(page: Page, chart: str, *, across: float, down: float) -> None:
    """Moves the mouse to a point of a chart's plot area, given as fractions of its size."""
    box = page.locator(f"{chart} .u-over").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * across, box["y"] + box["height"] * down)


def test_the_dashboard_charts_scripted_turns_and_drills_into_a_conversation(
    page: Page, stack: Stack, username: str
) -> None:
    client = start(page, stack, username)
    run_off_loop(make_operator(stack.database_url, username))
    chat = client.post("/api/conversations", json={"title": "busy"}).json()["id"]
    stack.provider.script(text("First answer."), text("Second answer, a little longer."))
    _send(client, chat, "What changed in the release?")
    _send(client, chat, "And the migration?")
    refused = client.post("/api/conversations", json={"title": "too big"}).json()["id"]
    assert _send(client, refused, log_text(60_000))["assistant_message"]["status"] == "failed"
    overflowing = client.post("/api/conversations", json={"title": "overflow"}).json()["id"]
    stack.provider.context_window = 10
    try:
        _send(client, overflowing, "Short question.")
    finally:
        stack.provider.context_window = None
    now = utcnow()
    hot = run_off_loop(_store_compactions(stack.database_url, username, now))

    page.goto(f"{stack.base_url}/operators?window=1h")
    expect(page.locator("#dashboard")).to_have_attribute("data-loaded", "true")
    expect(page.get_by_role("radio", name="1h")).to_have_attribute("aria-checked", "true")
    for chart in CHARTS:
        points = int(page.locator(f"#{chart}").get_attribute("data-points") or 0)
        assert points > 0, f"{chart} is empty"
        expect(page.locator(f"#{chart} canvas")).to_be_visible()
    # Hovering the minute of the hot conversation's turn (6,900 of 7,000, three minutes ago)
    # shows that minute's figure from the data endpoint in the chart's legend.
    summary = client.get("/api/metrics/summary", params={"window": "1h"}).json()
    window_start = datetime.fromisoformat(summary["window"]["start"])
    minute = int((now - timedelta(minutes=3) - window_start) / timedelta(minutes=1))
    highest = summary["turns"][minute]["utilization_max"]
    assert highest >= 6_900 / 7_000
    _hover(page, "#chart-utilization", across=minute / (len(summary["turns"]) - 1), down=0.5)
    expect(page.locator("#chart-utilization .u-legend .u-series").nth(2)).to_contain_text(_percent(highest))
    tiles = page.locator("#tiles")
    expect(tiles).to_contain_text("Refusals")
    rate = run_off_loop(_success_rate(stack.database_url))
    expect(tiles.locator(".tile", has_text="Success rate")).to_contain_text(rate)

    rows = page.locator("#pressure-table tbody tr")
    expect(rows.first).to_be_visible()
    order = [int(v) for v in rows.evaluate_all("rows => rows.map(r => r.dataset.conversation)")]
    # The refused request (far over the window) is under more pressure than 6,900 of 7,000.
    assert order.index(refused) < order.index(hot)
    hot_row = page.locator(f'#pressure-table tr[data-conversation="{hot}"]')
    expect(hot_row).to_contain_text("99%")
    screenshot(page, "dashboard")
    hot_row.click()
    drill = page.locator("#drill")
    expect(drill).to_have_attribute("data-loaded", "true")
    expect(drill.locator("#drill-title")).to_have_text(f"Conversation #{hot}")
    # Four sources hold tokens (system, tool schemas, history, current input); history is the third.
    assert int(page.locator("#drill-breakdown").get_attribute("data-points") or 0) == 4
    _hover(page, "#drill-breakdown", across=0.5, down=2.5 / 4)
    expect(page.locator("#drill-breakdown .u-legend")).to_contain_text("history")
    expect(page.locator("#drill-breakdown .u-legend .u-series").nth(1)).to_contain_text("6.5k")
    history = page.locator("#drill-compactions tbody tr")
    expect(history).to_have_count(3)
    expect(history.first).to_contain_text("fallback")
    expect(history.first).to_contain_text("timeout")
    screenshot(page, "dashboard-drill-down")

    page.get_by_role("radio", name="7d").click()
    expect(page.locator("#dashboard")).to_have_attribute("data-window", "7d")
    assert page.url.endswith("?window=7d")
    assert int(page.locator("#chart-ttft").get_attribute("data-points") or 0) > 0


def test_other_accounts_get_the_not_found_page(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    expect(page.get_by_role("link", name="Dashboard")).to_have_count(0)
    response = page.goto(f"{stack.base_url}/operators")
    assert response is not None and response.status == 404
    expect(page.locator("#dashboard")).to_have_count(0)


def test_operators_reach_the_dashboard_from_the_chat_page(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    run_off_loop(make_operator(stack.database_url, username))
    page.reload()
    page.get_by_role("link", name="Dashboard").click()
    page.wait_for_url(f"{stack.base_url}/operators")
    expect(page.locator("#dashboard")).to_have_attribute("data-loaded", "true")
