"""Pinned conversations list first (and page correctly across the pin boundary), archived ones
only when asked for, and a delete can be undone for a few minutes; migration 0016 on SQLite
and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx
from alembic import command
from sqlalchemy import text, update

from backend.db import alembic_config, create_engine, session_factory, transaction
from backend.models import Conversation
from backend.models.base import utcnow
from backend.services.conversations.conversations import RESTORE_WINDOW


async def _listed(client: httpx.AsyncClient, limit: int = 2, **params: object) -> list[int]:
    """Every page of the list, followed by cursor, as conversation ids."""
    ids: list[int] = []
    cursor = None
    while True:
        query = {"limit": limit, **params} | ({"cursor": cursor} if cursor else {})
        response = await client.get("/api/conversations", params=query)
        assert response.status_code == 200, response.text
        ids += [c["id"] for c in response.json()["items"]]
        cursor = response.json()["next_cursor"]
        if cursor is None:
            return ids


async def test_pinned_first_and_paging_across_the_pin(alice: httpx.AsyncClient) -> None:
    ids = [(await alice.post("/api/conversations", json={"title": f"c{i}"})).json()["id"] for i in range(7)]
    before = (await alice.get(f"/api/conversations/{ids[1]}")).json()
    for pinned in (ids[1], ids[3], ids[4]):
        shown = await alice.patch(f"/api/conversations/{pinned}", json={"pinned": True})
        assert shown.status_code == 200 and shown.json()["pinned"] is True
    # Pinning is no activity: the conversation keeps its place by last activity.
    assert (await alice.get(f"/api/conversations/{ids[1]}")).json()["updated_at"] == before["updated_at"]
    expected = [ids[4], ids[3], ids[1], ids[6], ids[5], ids[2], ids[0]]
    for limit in (1, 2, 3, 50):
        assert await _listed(alice, limit) == expected, limit
    first = (await alice.get("/api/conversations", params={"limit": 3})).json()["items"]
    assert [c["pinned"] for c in first] == [True, True, True]

    await alice.patch(f"/api/conversations/{ids[3]}", json={"pinned": False})
    assert await _listed(alice, 2) == [ids[4], ids[1], ids[6], ids[5], ids[3], ids[2], ids[0]]
    assert await _listed(alice, 2, q="c1") == [ids[1]]


async def test_archived_leave_the_list_and_come_back(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    ids = [
        (await alice.post("/api/conversations", json={"title": f"trip {i}"})).json()["id"] for i in range(4)
    ]
    for archived in (ids[0], ids[2]):
        shown = await alice.patch(f"/api/conversations/{archived}", json={"archived": True})
        assert shown.status_code == 200 and shown.json()["archived"] is True
    assert await _listed(alice) == [ids[3], ids[1]]
    assert await _listed(alice, 1, archived="true") == [ids[2], ids[0]]
    assert await _listed(alice, 1, archived="true", q="trip 0") == [ids[0]]
    assert await _listed(alice, 1, q="trip 0") == []
    # An archived conversation still opens.
    assert (await alice.get(f"/api/conversations/{ids[0]}")).json()["archived"] is True

    assert (await alice.patch(f"/api/conversations/{ids[0]}", json={"archived": False})).json()[
        "archived"
    ] is False
    assert await _listed(alice) == [ids[3], ids[1], ids[0]]
    # Archiving unpins; a pin asked for with the archive is not kept either.
    await alice.patch(f"/api/conversations/{ids[1]}", json={"pinned": True})
    archived = (await alice.patch(f"/api/conversations/{ids[1]}", json={"archived": True})).json()
    assert archived["archived"] is True and archived["pinned"] is False
    both = (await alice.patch(f"/api/conversations/{ids[1]}", json={"archived": True, "pinned": True})).json()
    assert both["pinned"] is False
    back = (
        await alice.patch(f"/api/conversations/{ids[1]}", json={"archived": False, "pinned": True})
    ).json()
    assert back["archived"] is False and back["pinned"] is True
    assert (await bob.patch(f"/api/conversations/{ids[1]}", json={"archived": True})).status_code == 404
    assert await _listed(bob, archived="true") == []
    assert (await alice.patch(f"/api/conversations/{ids[1]}", json={"pinned": "maybe"})).status_code == 422


async def test_a_delete_is_undone_within_the_window(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient, database_url: str
) -> None:
    ids = [(await alice.post("/api/conversations", json={"title": f"c{i}"})).json()["id"] for i in range(3)]
    await alice.patch(f"/api/conversations/{ids[0]}", json={"pinned": True})
    assert (await alice.delete(f"/api/conversations/{ids[0]}")).status_code == 204
    assert (await alice.get(f"/api/conversations/{ids[0]}")).status_code == 404
    assert await _listed(alice) == [ids[2], ids[1]]
    assert (await bob.post(f"/api/conversations/{ids[0]}/restore")).status_code == 404

    restored = await alice.post(f"/api/conversations/{ids[0]}/restore")
    assert restored.status_code == 200 and restored.json()["pinned"] is True
    assert await _listed(alice) == [ids[0], ids[2], ids[1]]  # back where it was
    # A live conversation has no delete to undo.
    assert (await alice.post(f"/api/conversations/{ids[1]}/restore")).status_code == 404

    await alice.delete(f"/api/conversations/{ids[1]}")
    engine = create_engine(database_url)
    async with transaction(session_factory(engine)) as db:
        old = utcnow() - RESTORE_WINDOW - timedelta(seconds=1)
        await db.execute(update(Conversation).where(Conversation.id == ids[1]).values(deleted_at=old))
    await engine.dispose()
    assert (await alice.post(f"/api/conversations/{ids[1]}/restore")).status_code == 404
    assert await _listed(alice) == [ids[0], ids[2]]


async def _columns(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            row = await connection.execute(text("SELECT * FROM conversations WHERE 1 = 0"))
            return set(row.keys())
    finally:
        await engine.dispose()


def test_migration_adds_and_drops_the_marks(unmigrated_url: str) -> None:
    config = alembic_config(unmigrated_url)
    command.upgrade(config, "0015")
    assert "pinned_at" not in asyncio.run(_columns(unmigrated_url))
    command.upgrade(config, "0016")
    assert {"pinned_at", "archived_at"} <= asyncio.run(_columns(unmigrated_url))
    command.downgrade(config, "0015")
    assert not {"pinned_at", "archived_at"} & asyncio.run(_columns(unmigrated_url))
