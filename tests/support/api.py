"""Client helpers: an authenticated API client per user."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.app import create_app
from backend.db import create_engine, session_factory, transaction
from backend.models import User
from backend.services.accounts import auth
from backend.settings import Settings
from tests.support.servers import serve

PASSWORD = "correct horse battery staple"
# Test servers speak plain HTTP on loopback. The support clients share one TLS context: httpx
# otherwise loads the CA bundle again for every client it makes (about 20 ms of CPU apiece).
LOOPBACK_TLS = ssl.create_default_context()
# Test suites sign many users up from one address, and run many turns and streams per user:
# their apps get roomy abuse limits; the tests of those limits set their own.
ROOMY_LIMITS: dict[str, object] = {
    "throttle_address_rate": "100000/minute",
    "throttle_username_rate": "100000/minute",
    "max_running_turns": 1000,
    "max_open_streams": 1000,
}


def loopback_client(base_url: str, **options: Any) -> httpx.AsyncClient:
    """An API client of a test server, on the shared TLS context."""
    return httpx.AsyncClient(base_url=base_url, verify=LOOPBACK_TLS, **options)


async def register(client: httpx.AsyncClient, username: str, password: str = PASSWORD) -> dict:
    response = await client.post("/api/auth/register", json={"username": username, "password": password})
    assert response.status_code == 201, response.text
    return response.json()


async def login(base_url: str, username: str, password: str = PASSWORD) -> httpx.AsyncClient:
    """A browser-like client: session cookie plus the CSRF header on every request."""
    session = loopback_client(base_url, timeout=30)
    response = await session.post("/api/auth/login", json={"username": username, "password": password})
    assert response.status_code == 200, response.text
    session.headers["X-CSRF-Token"] = response.json()["csrf_token"]
    return session


async def new_user(base_url: str, username: str) -> httpx.AsyncClient:
    async with loopback_client(base_url) as anonymous:
        await register(anonymous, username)
    return await login(base_url, username)


@asynccontextmanager
async def signed_in(base_url: str, username: str) -> AsyncIterator[httpx.AsyncClient]:
    """A new user's client, closed on exit."""
    client = await new_user(base_url, username)
    try:
        yield client
    finally:
        await client.aclose()


@asynccontextmanager
async def signed_in_on_both(
    base_url: str, other_url: str, username: str
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """A new user's session as a client of each of two processes (its cookie and CSRF header
    sent to both); both closed on exit."""
    async with signed_in(base_url, username) as client:
        other = loopback_client(other_url, cookies=client.cookies, headers=client.headers, timeout=30)
        try:
            yield client, other
        finally:
            await other.aclose()


async def assistant_reply(
    client: httpx.AsyncClient, conversation_id: int, content: str, attachment_ids: Sequence[int] = ()
) -> dict:
    """Sends `content` (with the attachments named) and waits for the turn: the assistant message
    (completed or failed)."""
    body = {"content": content, **({"attachment_ids": list(attachment_ids)} if attachment_ids else {})}
    response = await client.post(
        f"/api/conversations/{conversation_id}/messages", params={"wait": "true"}, json=body
    )
    assert response.status_code == 200, response.text
    return response.json()["assistant_message"]


async def started_turn(client: httpx.AsyncClient, content: str, title: str = "long") -> int:
    """A new conversation whose first message is sent without waiting for the turn (202): its id."""
    cid = int((await client.post("/api/conversations", json={"title": title})).json()["id"])
    response = await client.post(f"/api/conversations/{cid}/messages", json={"content": content})
    assert response.status_code == 202, response.text
    return cid


async def create_operator(database_url: str, username: str) -> None:
    """A new operator account stored directly, as `chat-shell create-user NAME --operator` does
    (for stacks where nobody registers without an invitation)."""
    engine = create_engine(database_url)
    try:
        async with transaction(session_factory(engine)) as db:
            await auth.create_user(db, auth.Passwords("CHEAPEST"), username, PASSWORD, operator=True)
    finally:
        await engine.dispose()


async def make_operator(database_url: str, username: str) -> None:
    """Grants an existing account the operator flag (what `chat-shell create-user --operator` sets)."""
    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as db, db.begin():
            await db.execute(update(User).where(User.username == username).values(is_operator=True))
    finally:
        await engine.dispose()


async def new_operator(base_url: str, database_url: str, username: str) -> httpx.AsyncClient:
    async with loopback_client(base_url) as anonymous:
        await register(anonymous, username)
    await make_operator(database_url, username)
    return await login(base_url, username)


@asynccontextmanager
async def serve_with_owner(
    settings: Settings, username: str
) -> AsyncIterator[tuple[str, httpx.AsyncClient, async_sessionmaker[AsyncSession]]]:
    """The app on a loopback port, a signed-in client of a new user, and sessions on the
    app's database (for seeding and checks)."""
    engine = create_engine(settings.resolved_database_url)
    try:
        async with serve(create_app(settings)) as base_url, signed_in(base_url, username) as client:
            yield base_url, client, session_factory(engine)
    finally:
        await engine.dispose()


async def wait_status(client: httpx.AsyncClient, cid: int, wanted: set[str], within: float = 40) -> dict:
    """The conversation's last message once its status is one of `wanted` (polled; fails past `within`)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        last = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"][-1]
        if last["status"] in wanted:
            return last
        assert asyncio.get_running_loop().time() < deadline, f"still {last['status']}"
        await asyncio.sleep(0.1)
