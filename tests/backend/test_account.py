"""The account page's API (issue 21): the password, the list of browser sessions with logging
one or all others out, and API tokens that authenticate as bearers; on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import httpx
import pytest
from sqlalchemy import select, update

from backend.db import session_factory
from backend.models import ApiToken
from backend.models.base import utcnow
from tests.backend.conftest import ServeChat
from tests.support.api import PASSWORD, login, new_user, started_turn
from tests.support.databases import engine_for
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.sse import read_stream

NEW_PASSWORD = "a brand new passphrase 42"
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"


async def _login_as(base_url: str, username: str, agent: str, password: str = PASSWORD) -> httpx.AsyncClient:
    client = httpx.AsyncClient(base_url=base_url, timeout=30, headers={"User-Agent": agent})
    response = await client.post("/api/auth/login", json={"username": username, "password": password})
    assert response.status_code == 200, response.text
    client.headers["X-CSRF-Token"] = response.json()["csrf_token"]
    return client


async def _tokens_in_db(database_url: str) -> list[ApiToken]:
    async with engine_for(database_url) as engine, session_factory(engine)() as db:
        return list(await db.scalars(select(ApiToken)))


@pytest.fixture
async def laptop(alice: httpx.AsyncClient, server: str) -> AsyncIterator[httpx.AsyncClient]:
    """A second session of alice's, logged in from Firefox."""
    client = await _login_as(server, "alice", FIREFOX)
    yield client
    await client.aclose()


async def test_sessions_list_each_login_with_its_browser_and_marks_this_one(
    laptop: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    listed = await laptop.get("/api/auth/sessions")
    assert listed.status_code == 200
    sessions = listed.json()
    assert len(sessions) == 2
    (this,) = [s for s in sessions if s["current"]]
    assert this["user_agent"] == FIREFOX
    assert this["last_seen_at"] and this["created_at"] and this["expires_at"]
    (other,) = [s for s in sessions if not s["current"]]
    assert other["user_agent"].startswith("python-httpx")
    # Another account sees only its own session; nothing of the secrets is listed.
    assert [s["current"] for s in (await bob.get("/api/auth/sessions")).json()] == [True]
    assert "token" not in str(sessions) and "csrf" not in str(sessions)


async def test_logging_one_session_out_ends_only_that_one(
    alice: httpx.AsyncClient, laptop: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    laptop_id = next(s["id"] for s in (await laptop.get("/api/auth/sessions")).json() if s["current"])
    # Another account's session id reads as missing, and stays logged in.
    refused = await bob.delete(f"/api/auth/sessions/{laptop_id}")
    assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    assert (await laptop.get("/api/auth/me")).status_code == 200

    assert (await alice.delete(f"/api/auth/sessions/{laptop_id}")).status_code == 204
    assert (await laptop.get("/api/auth/me")).status_code == 401
    assert (await alice.get("/api/auth/me")).status_code == 200
    assert [s["current"] for s in (await alice.get("/api/auth/sessions")).json()] == [True]
    assert (await alice.delete(f"/api/auth/sessions/{laptop_id}")).status_code == 404
    # Logging this session out clears its cookie: the next call is anonymous.
    mine = next(s["id"] for s in (await alice.get("/api/auth/sessions")).json())
    assert (await alice.delete(f"/api/auth/sessions/{mine}")).status_code == 204
    assert (await alice.get("/api/auth/me")).status_code == 401


async def test_log_out_all_others_keeps_this_session_and_the_tokens(
    alice: httpx.AsyncClient, server: str
) -> None:
    others = [await login(server, "alice") for _ in range(2)]
    secret = (await alice.post("/api/auth/tokens", json={"name": "script"})).json()["token"]
    try:
        ended = await alice.post("/api/auth/logout-others")
        assert ended.status_code == 200 and ended.json() == {"ended": 2}
        for other in others:
            assert (await other.get("/api/auth/me")).status_code == 401
        assert (await alice.get("/api/auth/me")).status_code == 200
        bearer = {"Authorization": f"Bearer {secret}"}
        assert (await alice.get("/api/auth/me", headers=bearer)).status_code == 200
        # A token has no session to keep: it cannot log the browsers out.
        async with httpx.AsyncClient(base_url=server, headers=bearer) as bot:
            from_token = await bot.post("/api/auth/logout-others")
        assert from_token.status_code == 403 and from_token.json()["code"] == "session_only"
    finally:
        for other in others:
            await other.aclose()


async def test_a_wrong_current_password_changes_nothing(alice: httpx.AsyncClient, server: str) -> None:
    other = await login(server, "alice")
    try:
        wrong = await alice.post(
            "/api/auth/password", json={"current_password": "not my password", "new_password": NEW_PASSWORD}
        )
        assert wrong.status_code == 401 and wrong.json()["code"] == "invalid_credentials"
        assert wrong.json()["message"] == "the current password is wrong"
        weak = await alice.post(
            "/api/auth/password", json={"current_password": PASSWORD, "new_password": "short"}
        )
        assert weak.status_code == 422 and weak.json()["code"] == "weak_password"
        # No session ended, and the old password still logs in.
        assert (await other.get("/api/auth/me")).status_code == 200
    finally:
        await other.aclose()
    async with httpx.AsyncClient(base_url=server) as anonymous:
        still = await anonymous.post("/api/auth/login", json={"username": "alice", "password": PASSWORD})
        assert still.status_code == 200


async def test_changing_the_password_logs_the_other_sessions_out(
    alice: httpx.AsyncClient, server: str
) -> None:
    other = await login(server, "alice")
    try:
        changed = await alice.post(
            "/api/auth/password", json={"current_password": PASSWORD, "new_password": NEW_PASSWORD}
        )
        assert changed.status_code == 204
        assert (await other.get("/api/auth/me")).status_code == 401
        assert (await alice.get("/api/auth/me")).status_code == 200
        assert len((await alice.get("/api/auth/sessions")).json()) == 1
    finally:
        await other.aclose()
    async with httpx.AsyncClient(base_url=server) as anonymous:
        old = await anonymous.post("/api/auth/login", json={"username": "alice", "password": PASSWORD})
        assert old.status_code == 401
        new = await anonymous.post("/api/auth/login", json={"username": "alice", "password": NEW_PASSWORD})
        assert new.status_code == 200


async def test_a_token_is_shown_once_stored_hashed_and_authenticates_as_a_bearer(
    alice: httpx.AsyncClient, server: str, database_url: str
) -> None:
    created = await alice.post("/api/auth/tokens", json={"name": "backup script", "expires_in_days": 30})
    assert created.status_code == 201
    body = created.json()
    secret = body["token"]
    expires_in = (datetime.fromisoformat(body["expires_at"]) - utcnow()).total_seconds() / 86400
    assert 29.9 < expires_in <= 30
    listed = (await alice.get("/api/auth/tokens")).json()
    assert [(t["name"], t["prefix"]) for t in listed] == [("backup script", secret[:10])]
    assert secret not in str(listed)
    (stored,) = await _tokens_in_db(database_url)
    assert stored.token_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(vars(stored))

    async with httpx.AsyncClient(base_url=server, headers={"Authorization": f"Bearer {secret}"}) as bot:
        assert (await bot.get("/api/auth/me")).json()["username"] == "alice"
        made = await bot.post("/api/conversations", json={"title": "by token"})
        assert made.status_code == 201
    titles = [c["title"] for c in (await alice.get("/api/conversations")).json()["items"]]
    assert titles == ["by token"]
    assert (await alice.get("/api/auth/tokens")).json()[0]["last_used_at"] is not None


async def test_expired_and_revoked_tokens_are_refused(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient, server: str, database_url: str
) -> None:
    expiring = (await alice.post("/api/auth/tokens", json={"name": "expiring"})).json()
    revoked = (await alice.post("/api/auth/tokens", json={"name": "revoked"})).json()
    async with engine_for(database_url) as engine, engine.begin() as connection:
        await connection.execute(
            update(ApiToken)
            .where(ApiToken.id == expiring["id"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    # Another account cannot revoke it; the owner can, once (again is the same answer).
    assert (await bob.delete(f"/api/auth/tokens/{revoked['id']}")).status_code == 404
    first = await alice.delete(f"/api/auth/tokens/{revoked['id']}")
    again = await alice.delete(f"/api/auth/tokens/{revoked['id']}")
    assert first.status_code == again.status_code == 200
    assert first.json()["revoked_at"] == again.json()["revoked_at"]
    for token in (expiring, revoked):
        async with httpx.AsyncClient(
            base_url=server, headers={"Authorization": f"Bearer {token['token']}"}
        ) as bot:
            refused = await bot.get("/api/conversations")
        assert refused.status_code == 401 and refused.json()["code"] == "invalid_token"


@pytest.fixture
async def checked_server(serve_chat: ServeChat) -> AsyncIterator[str]:
    """Streams re-check their credential every 0.3 s (as a stream served by another replica)."""
    async with serve_chat(stream_auth_check_seconds=0.3) as base_url:
        yield base_url


@pytest.mark.parametrize("credential", ["session", "token"])
async def test_a_stream_closes_once_its_session_is_logged_out_or_its_token_revoked(
    checked_server: str, scripted_provider: ScriptedProvider, credential: str
) -> None:
    owner = await new_user(checked_server, "streamer")
    try:
        scripted_provider.script(text("Never finishes. ", hang=True))
        cid = await started_turn(owner, "go")
        if credential == "session":
            reader = await login(checked_server, "streamer")
            mine = next(s["id"] for s in (await reader.get("/api/auth/sessions")).json() if s["current"])
            end = owner.delete(f"/api/auth/sessions/{mine}")
        else:
            made = (await owner.post("/api/auth/tokens", json={"name": "reader"})).json()
            reader = httpx.AsyncClient(
                base_url=checked_server, timeout=30, headers={"Authorization": f"Bearer {made['token']}"}
            )
            end = owner.delete(f"/api/auth/tokens/{made['id']}")
        streaming = asyncio.create_task(read_stream(reader, cid))
        await asyncio.sleep(0.5)
        assert not streaming.done()
        assert (await end).status_code in (200, 204)
        stream = await asyncio.wait_for(streaming, timeout=5)
        # Closed without an ending of the turn, which still runs for the owner's other session.
        assert stream.status == 200 and stream.terminal is None
        assert [e.event for e in stream.events][:1] == ["turn.started"]
        again = await read_stream(reader, cid)
        assert again.status == 401
        await reader.aclose()
        assert (await owner.post(f"/api/conversations/{cid}/stop")).status_code == 202
    finally:
        await owner.aclose()
