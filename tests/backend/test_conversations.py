"""Conversations: create, page newest first, rename, delete, fork, and ownership."""

from __future__ import annotations

import httpx
import pytest

from backend.db import create_engine, session_factory, transaction
from backend.models import Message, MessageStatus, Role


async def _add_messages(database_url: str, conversation_id: int, count: int, start: int = 1) -> None:
    """Stores user/assistant pairs directly, as finished turns would have left them."""
    engine = create_engine(database_url)
    async with transaction(session_factory(engine)) as db:
        from backend.models import Conversation

        conversation = await db.get(Conversation, conversation_id)
        assert conversation is not None
        for offset in range(count):
            number = start + offset
            role = Role.USER if number % 2 else Role.ASSISTANT
            message = Message(
                conversation_id=conversation_id,
                message_id=number,
                role=role,
                status=MessageStatus.COMPLETED,
                content=f"message {number}" if role == Role.USER else "",
                result=None
                if role == Role.USER
                else {
                    "value": f"reply {number}",
                    "messages_chain": [{"role": "assistant", "content": "x"}],
                },
                parent_pk=conversation.current_leaf_pk,
            )
            db.add(message)
            await db.flush()
            conversation.current_leaf_pk = message.id
        conversation.next_message_id = start + count
    await engine.dispose()


async def test_create_list_newest_first_with_paging(alice: httpx.AsyncClient) -> None:
    ids = [(await alice.post("/api/conversations", json={"title": f"c{i}"})).json()["id"] for i in range(5)]
    first = (await alice.get("/api/conversations", params={"limit": 2})).json()
    assert [c["id"] for c in first["items"]] == ids[::-1][:2]
    second = (
        await alice.get("/api/conversations", params={"limit": 2, "cursor": first["next_cursor"]})
    ).json()
    third = (
        await alice.get("/api/conversations", params={"limit": 2, "cursor": second["next_cursor"]})
    ).json()
    assert [c["id"] for c in second["items"] + third["items"]] == ids[::-1][2:]
    assert third["next_cursor"] is None
    bad = await alice.get("/api/conversations", params={"cursor": "%%%not-a-cursor"})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_cursor"


async def test_search_rename_delete(alice: httpx.AsyncClient) -> None:
    trip = (await alice.post("/api/conversations", json={"title": "Trip to Kyoto"})).json()
    await alice.post("/api/conversations", json={"title": "100% done_deal"})
    found = (await alice.get("/api/conversations", params={"q": "kyoto"})).json()["items"]
    assert [c["id"] for c in found] == [trip["id"]]
    # LIKE wildcards in the query are literal characters.
    assert [
        c["title"] for c in (await alice.get("/api/conversations", params={"q": "%"})).json()["items"]
    ] == ["100% done_deal"]
    assert (await alice.get("/api/conversations", params={"q": "_"})).json()["items"][0][
        "title"
    ] == "100% done_deal"

    renamed = await alice.patch(f"/api/conversations/{trip['id']}", json={"title": "  Kyoto, in spring  "})
    assert renamed.status_code == 200 and renamed.json()["title"] == "Kyoto, in spring"
    assert (await alice.delete(f"/api/conversations/{trip['id']}")).status_code == 204
    assert (await alice.get(f"/api/conversations/{trip['id']}")).status_code == 404
    assert trip["id"] not in [c["id"] for c in (await alice.get("/api/conversations")).json()["items"]]


@pytest.mark.parametrize(
    "title",
    [
        "'; DROP TABLE conversations; --",
        "Robert'); DELETE FROM users;--",
        "名前 🚀 עברית \u200f mixed",
        "a" * 200,
    ],
)
async def test_titles_are_stored_verbatim(alice: httpx.AsyncClient, title: str) -> None:
    made = await alice.post("/api/conversations", json={"title": title})
    assert made.status_code == 201
    assert (await alice.get(f"/api/conversations/{made.json()['id']}")).json()["title"] == title.strip()


@pytest.mark.parametrize("title", ["", "   ", "\x00\x01", "a" * 201])
async def test_bad_titles_are_rejected(alice: httpx.AsyncClient, title: str) -> None:
    response = await alice.post("/api/conversations", json={"title": title})
    assert response.status_code == 422 and response.json()["code"] == "validation_error"
    assert (await alice.get("/api/conversations")).json()["items"] == []


async def test_unknown_fields_and_ids(alice: httpx.AsyncClient) -> None:
    assert (await alice.post("/api/conversations", json={"title": "x", "owner_id": 99})).status_code == 422
    assert (await alice.get("/api/conversations/999999")).json()["code"] == "not_found"
    assert (await alice.get("/api/conversations/not-a-number")).status_code == 422
    assert (await alice.patch("/api/conversations/999999", json={"title": "x"})).status_code == 404


async def test_other_users_conversations_are_not_found(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    mine = (await alice.post("/api/conversations", json={"title": "private"})).json()
    cid = mine["id"]
    for method, path, body in [
        ("GET", f"/api/conversations/{cid}", None),
        ("PATCH", f"/api/conversations/{cid}", {"title": "stolen"}),
        ("DELETE", f"/api/conversations/{cid}", None),
        ("GET", f"/api/conversations/{cid}/messages", None),
        ("POST", f"/api/conversations/{cid}/fork", {"message_id": 1}),
    ]:
        response = await bob.request(method, path, json=body)
        assert response.status_code == 404, (method, path)
        assert response.json()["code"] == "not_found"
    assert (await bob.get("/api/conversations")).json()["items"] == []
    assert (await alice.get(f"/api/conversations/{cid}")).json()["title"] == "private"


async def test_message_history_pages_backwards(alice: httpx.AsyncClient, database_url: str) -> None:
    cid = (await alice.post("/api/conversations", json={"title": "long"})).json()["id"]
    await _add_messages(database_url, cid, 7)
    newest = (await alice.get(f"/api/conversations/{cid}/messages", params={"limit": 3})).json()
    assert [m["message_id"] for m in newest["items"]] == [5, 6, 7] and newest["has_more"]
    older = (
        await alice.get(f"/api/conversations/{cid}/messages", params={"limit": 3, "before_message_id": 5})
    ).json()
    assert [m["message_id"] for m in older["items"]] == [2, 3, 4] and older["has_more"]
    oldest = (
        await alice.get(f"/api/conversations/{cid}/messages", params={"limit": 3, "before_message_id": 2})
    ).json()
    assert [m["message_id"] for m in oldest["items"]] == [1] and not oldest["has_more"]
    # The user-visible view never exposes the model-visible chain.
    assistant = newest["items"][1]
    assert assistant["result"] == {"value": "reply 6"}


async def test_fork_inherits_history_up_to_the_fork_point(
    alice: httpx.AsyncClient, database_url: str
) -> None:
    cid = (await alice.post("/api/conversations", json={"title": "root"})).json()["id"]
    await _add_messages(database_url, cid, 6)
    fork = await alice.post(f"/api/conversations/{cid}/fork", json={"message_id": 4})
    assert fork.status_code == 201
    child = fork.json()
    assert child["forked_from"] == {"conversation_id": cid, "message_id": 4}
    await _add_messages(database_url, child["id"], 2, start=5)

    items = (await alice.get(f"/api/conversations/{child['id']}/messages")).json()["items"]
    assert [(m["conversation_id"], m["message_id"]) for m in items] == [
        (cid, 1),
        (cid, 2),
        (cid, 3),
        (cid, 4),
        (child["id"], 5),
        (child["id"], 6),
    ]
    # A fork of a fork, at an inherited message.
    grandchild = (await alice.post(f"/api/conversations/{child['id']}/fork", json={"message_id": 2})).json()
    items = (await alice.get(f"/api/conversations/{grandchild['id']}/messages")).json()["items"]
    assert [(m["conversation_id"], m["message_id"]) for m in items] == [(cid, 1), (cid, 2)]
    # Deleting the parent hides it from its owner but the fork keeps its history.
    await alice.delete(f"/api/conversations/{cid}")
    items = (await alice.get(f"/api/conversations/{child['id']}/messages")).json()["items"]
    assert len(items) == 6

    missing = await alice.post(f"/api/conversations/{child['id']}/fork", json={"message_id": 99})
    assert missing.status_code == 404
