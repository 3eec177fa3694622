"""Accounts: registration, login sessions with CSRF, API tokens, and their failure modes."""

from __future__ import annotations

import asyncio
import os
import time

import httpx
import pytest

from tests.support.api import PASSWORD, login, register


async def test_register_login_me_logout(anonymous: httpx.AsyncClient, server: str) -> None:
    user = await register(anonymous, "carol")
    assert user["username"] == "carol" and user["is_operator"] is False
    assert "password" not in str(user).lower()

    client = await login(server, "carol")
    cookie_header = [h for h in client.cookies.jar if h.name == "chat_shell_session"]
    assert cookie_header and cookie_header[0].has_nonstandard_attr("HttpOnly")
    me = await client.get("/api/auth/me")
    assert me.status_code == 200 and me.json()["username"] == "carol"

    assert (await client.post("/api/auth/logout")).status_code == 204
    after = await client.get("/api/auth/me")
    assert after.status_code == 401 and after.json()["code"] == "unauthorized"
    await client.aclose()


@pytest.mark.parametrize(
    ("username", "password", "code"),
    [
        ("ab", PASSWORD, "invalid_username"),
        ("bad name", PASSWORD, "invalid_username"),
        ("../etc", PASSWORD, "invalid_username"),
        ("dave", "short", "weak_password"),
        ("dave", "password1", "weak_password"),
        ("dave", "aaaaaaaaaaaa", "weak_password"),
        ("davedave", "davedave", "weak_password"),
    ],
)
async def test_register_rejects_bad_credentials(
    anonymous: httpx.AsyncClient, username: str, password: str, code: str
) -> None:
    response = await anonymous.post("/api/auth/register", json={"username": username, "password": password})
    assert response.status_code == 422
    assert response.json()["code"] == code


async def test_empty_password_and_malformed_bodies(anonymous: httpx.AsyncClient) -> None:
    empty = await anonymous.post("/api/auth/register", json={"username": "erin", "password": ""})
    assert empty.status_code == 422 and empty.json()["code"] == "validation_error"
    wrong_type = await anonymous.post("/api/auth/register", json={"username": 5, "password": ["x"]})
    assert wrong_type.status_code == 422 and wrong_type.json()["code"] == "validation_error"
    broken = await anonymous.post(
        "/api/auth/register", content=b'{"username": "erin",', headers={"content-type": "application/json"}
    )
    assert broken.status_code == 422 and broken.json()["code"] == "validation_error"
    form = await anonymous.post("/api/auth/login", content=b"username=a&password=b")
    assert form.status_code == 422


async def test_duplicate_username_is_a_conflict(anonymous: httpx.AsyncClient) -> None:
    await register(anonymous, "frank")
    again = await anonymous.post("/api/auth/register", json={"username": "frank", "password": PASSWORD + "!"})
    assert again.status_code == 409 and again.json()["code"] == "username_taken"
    # The failed insert left nothing half-written: the original password still works.
    ok = await anonymous.post("/api/auth/login", json={"username": "frank", "password": PASSWORD})
    assert ok.status_code == 200


async def test_wrong_password_and_unknown_user_look_the_same(anonymous: httpx.AsyncClient) -> None:
    await register(anonymous, "grace")
    wrong = await anonymous.post("/api/auth/login", json={"username": "grace", "password": "not it at all"})
    unknown = await anonymous.post(
        "/api/auth/login", json={"username": "nobody", "password": "not it at all"}
    )
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json()


async def test_password_hashing_never_queues_behind_the_default_thread_pool(
    anonymous: httpx.AsyncClient, server: str
) -> None:
    """Every thread of the event loop's default pool busy for 2 s (file work, say): registering
    (a hash) and logging in (a verify) still answer within a second each, because password
    hashing has threads of its own."""
    loop = asyncio.get_running_loop()
    default_threads = min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's default size
    busy = [loop.run_in_executor(None, time.sleep, 2) for _ in range(default_threads)]
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    await register(anonymous, "heidi")
    registered = time.perf_counter()
    client = await login(server, "heidi")
    logged_in = time.perf_counter()
    await client.aclose()
    await asyncio.gather(*busy)
    assert registered - started < 1.0 and logged_in - registered < 1.0


async def test_cookie_requests_need_the_csrf_header(alice: httpx.AsyncClient) -> None:
    token = alice.headers.pop("X-CSRF-Token")
    refused = await alice.post("/api/conversations", json={"title": "x"})
    assert refused.status_code == 403 and refused.json()["code"] == "csrf_failed"
    forged = await alice.post("/api/conversations", json={"title": "x"}, headers={"X-CSRF-Token": "guess"})
    assert forged.status_code == 403
    # Reads need no token; the refused writes stored nothing.
    listing = await alice.get("/api/conversations")
    assert listing.status_code == 200 and listing.json()["items"] == []
    ok = await alice.post("/api/conversations", json={"title": "x"}, headers={"X-CSRF-Token": token})
    assert ok.status_code == 201


async def test_api_tokens_create_use_revoke(alice: httpx.AsyncClient, server: str) -> None:
    created = await alice.post("/api/auth/tokens", json={"name": "script"})
    assert created.status_code == 201
    secret = created.json()["token"]
    assert secret.startswith("cs_")

    async with httpx.AsyncClient(base_url=server, headers={"Authorization": f"Bearer {secret}"}) as bot:
        # Bearer clients need no CSRF header.
        made = await bot.post("/api/conversations", json={"title": "from a script"})
        assert made.status_code == 201
        listed = await alice.get("/api/auth/tokens")
        assert [t["name"] for t in listed.json()] == ["script"]
        assert "token" not in listed.json()[0]

        revoked = await alice.delete(f"/api/auth/tokens/{created.json()['id']}")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"]
        after = await bot.get("/api/conversations")
        assert after.status_code == 401 and after.json()["code"] == "invalid_token"

    async with httpx.AsyncClient(base_url=server, headers={"Authorization": "Bearer cs_made_up"}) as bogus:
        assert (await bogus.get("/api/conversations")).json()["code"] == "invalid_token"
    async with httpx.AsyncClient(base_url=server, headers={"Authorization": "Basic abc"}) as basic:
        assert (await basic.get("/api/conversations")).status_code == 401


async def test_expired_token_is_refused(alice: httpx.AsyncClient, server: str, database_url: str) -> None:
    from datetime import timedelta

    from sqlalchemy import update

    from backend.db import create_engine
    from backend.models import ApiToken
    from backend.models.base import utcnow

    created = (await alice.post("/api/auth/tokens", json={"name": "short", "expires_in_days": 1})).json()
    engine = create_engine(database_url)
    async with engine.begin() as connection:
        await connection.execute(
            update(ApiToken)
            .where(ApiToken.id == created["id"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    await engine.dispose()
    async with httpx.AsyncClient(
        base_url=server, headers={"Authorization": f"Bearer {created['token']}"}
    ) as bot:
        response = await bot.get("/api/conversations")
    assert response.status_code == 401 and response.json()["code"] == "invalid_token"


async def test_other_users_tokens_are_not_found(alice: httpx.AsyncClient, bob: httpx.AsyncClient) -> None:
    created = (await alice.post("/api/auth/tokens", json={"name": "mine"})).json()
    response = await bob.delete(f"/api/auth/tokens/{created['id']}")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


async def test_no_credentials_is_401(anonymous: httpx.AsyncClient) -> None:
    for path in ("/api/conversations", "/api/auth/tokens", "/api/auth/me"):
        response = await anonymous.get(path)
        assert response.status_code == 401 and response.json()["code"] == "unauthorized"
