"""Search tests' shared steps: chat and search through the API, and, for the migration tests, a
conversation stored before a search migration and the service's search run on that database."""

from __future__ import annotations

import httpx
from sqlalchemy import bindparam, select, text

from backend.db import create_engine, session_factory
from backend.models import User
from backend.models.base import JsonDoc
from backend.services import search as message_search
from tests.support import databases

OLD_USER = "early"


async def chat(client: httpx.AsyncClient, title: str, *turns: str) -> int:
    """A new conversation with each of `turns` sent and answered; its id."""
    cid = (await client.post("/api/conversations", json={"title": title})).json()["id"]
    for content in turns:
        response = await client.post(
            f"/api/conversations/{cid}/messages", params={"wait": "true"}, json={"content": content}
        )
        assert response.status_code == 200, response.text
    return cid


async def api_search(client: httpx.AsyncClient, query: str, limit: int = 20) -> httpx.Response:
    return await client.get("/api/search", params={"q": query, "limit": limit})


def hit_ids(response: httpx.Response) -> list[tuple[int, int]]:
    """The hits as (conversation id, message id), in the order given."""
    assert response.status_code == 200, response.text
    return [(hit["conversation_id"], hit["message_id"]) for hit in response.json()["items"]]


async def seed_old_conversation(url: str, question: str, answer: str) -> None:
    """With plain SQL (the schema of an older revision): the user `OLD_USER` and conversation 1
    holding `question` (message 1) and the completed reply `answer` (message 2)."""
    async with databases.plain_sql(url) as connection:
        await databases.insert_first_user(connection, OLD_USER)
        await connection.execute(
            text(
                "INSERT INTO conversations (id, owner_id, title, created_at, updated_at, "
                "next_message_id) VALUES (1, 1, 'Old', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 3)"
            )
        )
        for number, role, content, result in (
            (1, "user", question, None),
            (2, "assistant", "", {"value": answer}),
        ):
            await connection.execute(
                text(
                    "INSERT INTO messages (conversation_id, message_id, role, status, content, result, "
                    "has_checkpoint, created_at, updated_at) VALUES (1, :n, :role, 'completed', "
                    ":content, :result, false, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                ).bindparams(bindparam("result", type_=JsonDoc)),
                {"n": number, "role": role, "content": content, "result": result},
            )


async def old_user_finds(url: str, query: str) -> list[int]:
    """The message ids the service's search finds for `OLD_USER` (at most 10, newest first)."""
    engine = create_engine(url)
    try:
        async with session_factory(engine)() as db:
            user = await db.scalar(select(User).where(User.username == OLD_USER))
            assert user is not None
            return [hit.message_id for hit in await message_search.search(db, user, query, 10)]
    finally:
        await engine.dispose()
