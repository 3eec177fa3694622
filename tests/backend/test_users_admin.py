"""The operators' users page API (issue 21): create, disable and enable (a disabled account's
sessions, tokens and open streams stop at once; it cannot log in), reset a password, make or
revoke operator (never the last one), invite codes, and the audit log of each; on SQLite and
PostgreSQL. Plus the first operator from the command line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from backend.app import create_app
from backend.db import session_factory
from backend.models import Message, Turn, TurnStatus, User
from backend.services.errors import Forbidden
from backend.settings import Settings
from tests.backend import test_compaction_ahead as ahead
from tests.backend.conftest import ServeChat
from tests.support.api import PASSWORD, create_operator, login, new_operator, new_user, started_turn
from tests.support.cli import run_cli
from tests.support.databases import engine_for
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.servers import serve
from tests.support.sse import read_stream
from tests.support.texts import WORDS

NEW_PASSWORD = "reset by an operator 7"


async def _audit(operator: httpx.AsyncClient) -> list[tuple[str | None, str, str | None]]:
    """(who, what, on whom) of the audit log, oldest first."""
    listed = await operator.get("/api/admin/audit")
    assert listed.status_code == 200, listed.text
    return [(e["actor_name"], e["action"], e["target_name"]) for e in reversed(listed.json())]


async def _user_id(operator: httpx.AsyncClient, username: str) -> int:
    users = (await operator.get("/api/admin/users")).json()
    return next(u["id"] for u in users if u["username"] == username)


async def _login_status(base_url: str, username: str, password: str = PASSWORD) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base_url) as anonymous:
        return await anonymous.post("/api/auth/login", json={"username": username, "password": password})


@pytest.fixture
async def olga(server: str, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    client = await new_operator(server, database_url, "olga")
    yield client
    await client.aclose()


async def test_an_operator_lists_and_creates_accounts(olga: httpx.AsyncClient, server: str) -> None:
    made = await olga.post("/api/admin/users", json={"username": "dora", "password": PASSWORD})
    assert made.status_code == 201
    assert made.json()["username"] == "dora" and made.json()["is_operator"] is False
    boss = await olga.post(
        "/api/admin/users", json={"username": "boss", "password": PASSWORD, "is_operator": True}
    )
    assert boss.status_code == 201 and boss.json()["is_operator"] is True
    taken = await olga.post("/api/admin/users", json={"username": "DORA", "password": PASSWORD})
    assert taken.status_code == 409 and taken.json()["code"] == "username_taken"
    weak = await olga.post("/api/admin/users", json={"username": "weak", "password": "short"})
    assert weak.status_code == 422 and weak.json()["code"] == "weak_password"

    users = (await olga.get("/api/admin/users")).json()
    assert [(u["username"], u["is_operator"], u["disabled_at"]) for u in users] == [
        ("boss", True, None),
        ("dora", False, None),
        ("olga", True, None),
    ]
    assert next(u for u in users if u["username"] == "olga")["last_seen_at"] is not None
    assert (await _login_status(server, "dora")).status_code == 200
    assert await _audit(olga) == [("olga", "user.create", "dora"), ("olga", "user.create", "boss")]


async def test_a_disabled_account_stops_at_once_and_cannot_log_in(
    olga: httpx.AsyncClient, server: str
) -> None:
    dora = await new_user(server, "dora")
    secret = (await dora.post("/api/auth/tokens", json={"name": "cron"})).json()["token"]
    bearer = {"Authorization": f"Bearer {secret}"}
    try:
        dora_id = await _user_id(olga, "dora")
        disabled = await olga.post(f"/api/admin/users/{dora_id}/disable")
        assert disabled.status_code == 200 and disabled.json()["disabled_at"] is not None
        assert (await dora.get("/api/auth/me")).status_code == 401
        refused = await dora.get("/api/conversations", headers=bearer)
        assert refused.status_code == 401 and refused.json()["code"] == "invalid_token"
        # The right password gets a clear refusal; a wrong one the usual answer.
        login_refused = await _login_status(server, "dora")
        assert login_refused.status_code == 403
        assert login_refused.json() == {
            "code": "account_disabled",
            "message": "this account is disabled; ask an operator to enable it",
        }
        assert (await _login_status(server, "dora", "not the password")).json()[
            "code"
        ] == "invalid_credentials"
        page = await dora.get("/", follow_redirects=False)
        assert page.status_code == 303

        enabled = await olga.post(f"/api/admin/users/{dora_id}/enable")
        assert enabled.status_code == 200 and enabled.json()["disabled_at"] is None
        assert (await _login_status(server, "dora")).status_code == 200
        # Its old tokens stay revoked: whoever held one while it was disabled holds nothing.
        assert (await dora.get("/api/conversations", headers=bearer)).status_code == 401
        detail = (await olga.get("/api/admin/audit")).json()[1]["detail"]
        assert detail == "sessions ended: 1, tokens revoked: 1, running turns stopped: 0"
        assert await _audit(olga) == [("olga", "user.disable", "dora"), ("olga", "user.enable", "dora")]
    finally:
        await dora.aclose()


async def test_unknown_accounts_and_ids_are_not_found(olga: httpx.AsyncClient) -> None:
    for method, path in (
        ("POST", "/api/admin/users/999999/disable"),
        ("POST", "/api/admin/users/999999/enable"),
        ("PUT", "/api/admin/users/999999/operator"),
        ("DELETE", "/api/auth/invites/999999"),
    ):
        response = await olga.request(method, path)
        assert response.status_code == 404, (method, path, response.text)
    reset = await olga.post("/api/admin/users/999999/password", json={"password": NEW_PASSWORD})
    assert reset.status_code == 404
    assert await _audit(olga) == []


async def test_an_operator_resets_a_password_and_the_sessions_end(
    olga: httpx.AsyncClient, server: str
) -> None:
    dora = await new_user(server, "dora")
    try:
        dora_id = await _user_id(olga, "dora")
        weak = await olga.post(f"/api/admin/users/{dora_id}/password", json={"password": "dora"})
        assert weak.status_code == 422 and weak.json()["code"] == "weak_password"
        assert (await dora.get("/api/auth/me")).status_code == 200
        reset = await olga.post(f"/api/admin/users/{dora_id}/password", json={"password": NEW_PASSWORD})
        assert reset.status_code == 204
        assert (await dora.get("/api/auth/me")).status_code == 401
        assert (await _login_status(server, "dora")).status_code == 401
        assert (await _login_status(server, "dora", NEW_PASSWORD)).status_code == 200
        assert await _audit(olga) == [("olga", "user.password_reset", "dora")]
    finally:
        await dora.aclose()


async def test_the_operator_role_is_granted_revoked_and_never_leaves_no_operator(
    olga: httpx.AsyncClient, server: str
) -> None:
    olga_id = await _user_id(olga, "olga")
    # Alone: olga can neither give the role up nor disable herself.
    last = await olga.delete(f"/api/admin/users/{olga_id}/operator")
    assert last.status_code == 409 and last.json()["code"] == "last_operator"
    assert "olga is the last operator" in last.json()["message"]
    itself = await olga.post(f"/api/admin/users/{olga_id}/disable")
    assert itself.status_code == 409 and itself.json()["code"] == "cannot_disable_self"
    assert (await olga.get("/api/admin/users")).status_code == 200

    dora = await new_user(server, "dora")
    try:
        assert (await dora.get("/api/admin/users")).status_code == 403
        dora_id = await _user_id(olga, "dora")
        granted = await olga.put(f"/api/admin/users/{dora_id}/operator")
        assert granted.status_code == 200 and granted.json()["is_operator"] is True
        assert (await dora.get("/api/admin/users")).status_code == 200
        # A disabled operator does not count: olga would again be the last one who can act.
        assert (await olga.post(f"/api/admin/users/{dora_id}/disable")).status_code == 200
        again = await olga.delete(f"/api/admin/users/{olga_id}/operator")
        assert again.status_code == 409 and again.json()["code"] == "last_operator"
        assert (await olga.post(f"/api/admin/users/{dora_id}/enable")).status_code == 200
        # With dora enabled and an operator, olga may step down (and the page is closed to her).
        dora_again = await login(server, "dora")
        try:
            stepped = await olga.delete(f"/api/admin/users/{olga_id}/operator")
            assert stepped.status_code == 200 and stepped.json()["is_operator"] is False
            assert (await olga.get("/api/admin/users")).status_code == 403
            # Now dora is the last operator, and the last one cannot be disabled by anyone.
            assert (await dora_again.delete(f"/api/admin/users/{dora_id}/operator")).status_code == 409
            assert await _audit(dora_again) == [
                ("olga", "user.operator_grant", "dora"),
                ("olga", "user.disable", "dora"),
                ("olga", "user.enable", "dora"),
                ("olga", "user.operator_revoke", "olga"),
            ]
        finally:
            await dora_again.aclose()
    finally:
        await dora.aclose()


async def test_two_operators_stepping_down_at_once_leave_one_operator(
    olga: httpx.AsyncClient, server: str
) -> None:
    made = await olga.post(
        "/api/admin/users", json={"username": "boss", "password": PASSWORD, "is_operator": True}
    )
    boss = await login(server, "boss")
    try:
        olga_id, boss_id = await _user_id(olga, "olga"), made.json()["id"]
        for _ in range(3):
            answers = await asyncio.gather(
                olga.delete(f"/api/admin/users/{olga_id}/operator"),
                boss.delete(f"/api/admin/users/{boss_id}/operator"),
            )
            assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
            (kept,) = [a for a in answers if a.status_code == 409]
            assert kept.json()["code"] == "last_operator"
            (left,) = [
                client for client, a in zip((olga, boss), answers, strict=True) if a.status_code == 409
            ]
            users = (await left.get("/api/admin/users")).json()
            assert [u["username"] for u in users if u["is_operator"]] == ["olga" if left is olga else "boss"]
            # Both operators again for the next round.
            other_id = boss_id if left is olga else olga_id
            assert (await left.put(f"/api/admin/users/{other_id}/operator")).status_code == 200
    finally:
        await boss.aclose()


async def test_other_accounts_get_403_from_the_api_and_404_from_the_page(
    alice: httpx.AsyncClient, anonymous: httpx.AsyncClient
) -> None:
    for method, path in (
        ("GET", "/api/admin/users"),
        ("POST", "/api/admin/users"),
        ("GET", "/api/admin/audit"),
        ("POST", "/api/admin/users/1/disable"),
        ("PUT", "/api/admin/users/1/operator"),
        ("GET", "/api/auth/invites"),
    ):
        denied = await alice.request(method, path, json={} if method == "POST" else None)
        assert denied.status_code == 403 and denied.json()["code"] == "operator_only", (method, path)
        assert (await anonymous.request(method, path)).status_code == 401
    page = await alice.get("/admin/users")
    assert page.status_code == 404 and "Page not found" in page.text
    assert (await anonymous.get("/admin/users", follow_redirects=False)).headers["location"] == (
        "/login?next=/admin/users"
    )
    # Refused actions leave nothing behind: alice is still not an operator.
    assert (await alice.get("/api/auth/me")).json()["is_operator"] is False


@pytest.fixture
async def invite_server(database_url: str, make_settings: Callable[..., Settings]) -> AsyncIterator[str]:
    async with serve(create_app(make_settings(database_url, registration="invite"))) as base_url:
        yield base_url


async def _register(base_url: str, username: str, code: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base_url) as anonymous:
        return await anonymous.post(
            "/api/auth/register", json={"username": username, "password": PASSWORD, "invite_code": code}
        )


async def test_invite_codes_are_listed_spent_and_revoked(invite_server: str, database_url: str) -> None:
    await create_operator(database_url, "olga")
    olga = await login(invite_server, "olga")
    try:
        first = (await olga.post("/api/auth/invites", json={"days": 3})).json()["code"]
        second = (await olga.post("/api/auth/invites", json={})).json()["code"]
        listed = (await olga.get("/api/auth/invites")).json()
        assert [(i["used_by"], i["used_at"]) for i in listed] == [(None, None), (None, None)]
        assert first not in str(listed) and second not in str(listed)

        assert (await _register(invite_server, "newcomer", first)).status_code == 201
        spent_id, unspent_id = listed[1]["id"], listed[0]["id"]
        used = {i["id"]: i["used_by"] for i in (await olga.get("/api/auth/invites")).json()}
        assert used == {unspent_id: None, spent_id: "newcomer"}

        spent = await olga.delete(f"/api/auth/invites/{spent_id}")
        assert spent.status_code == 409 and spent.json()["code"] == "invite_spent"
        assert (await olga.delete(f"/api/auth/invites/{unspent_id}")).status_code == 204
        refused = await _register(invite_server, "latecomer", second)
        assert refused.status_code == 403 and refused.json()["code"] == "invalid_invite"
        assert [i["id"] for i in (await olga.get("/api/auth/invites")).json()] == [spent_id]
        assert await _audit(olga) == [
            ("olga", "invite.create", None),
            ("olga", "invite.create", None),
            ("olga", "invite.revoke", None),
        ]
    finally:
        await olga.aclose()


@pytest.fixture
async def chat_backend(serve_chat: ServeChat) -> AsyncIterator[str]:
    """Streams re-check their credential only every minute: a stream that closes within
    seconds was closed by the disabling itself."""
    async with serve_chat(stream_auth_check_seconds=60) as base_url:
        yield base_url


async def test_a_disabled_accounts_open_stream_closes_at_once(
    chat_backend: str, database_url: str, scripted_provider: ScriptedProvider
) -> None:
    olga = await new_operator(chat_backend, database_url, "olga")
    dora = await new_user(chat_backend, "dora")
    try:
        scripted_provider.script(text("Still writing. ", hang=True))
        cid = await started_turn(dora, "go")
        streaming = asyncio.create_task(read_stream(dora, cid))
        await asyncio.sleep(0.5)
        assert not streaming.done()
        started = asyncio.get_running_loop().time()
        dora_id = await _user_id(olga, "dora")
        assert (await olga.post(f"/api/admin/users/{dora_id}/disable")).status_code == 200
        stream = await asyncio.wait_for(streaming, timeout=10)
        assert asyncio.get_running_loop().time() - started < 3
        assert stream.status == 200 and stream.terminal is None
        assert (await read_stream(dora, cid)).status == 401
        # Its running turn is stopped too: it ends cancelled, keeping what it wrote.
        deadline = asyncio.get_running_loop().time() + 10
        while (status := await _latest_turn_status(database_url, cid)) == TurnStatus.RUNNING:
            assert asyncio.get_running_loop().time() < deadline, "the turn kept running"
            await asyncio.sleep(0.05)
        assert status == TurnStatus.CANCELLED
        audit = (await olga.get("/api/admin/audit")).json()[0]
        assert audit["detail"] == "sessions ended: 1, tokens revoked: 0, running turns stopped: 1"
    finally:
        await olga.aclose()
        await dora.aclose()


async def _latest_turn_status(database_url: str, cid: int) -> TurnStatus:
    async with engine_for(database_url) as engine, session_factory(engine)() as db:
        status = await db.scalar(
            select(Turn.status).where(Turn.conversation_id == cid).order_by(Turn.id.desc()).limit(1)
        )
        assert status is not None
        return TurnStatus(status)


async def test_the_first_operator_comes_from_the_command_line(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """README "The first operator": `chat-shell create-user NAME --operator` on a fresh
    database, then the users page is theirs; the audit log names the command line."""
    env: dict[str, Any] = {"CHAT_SHELL_DATABASE_URL": sqlite_url}
    made = run_cli("create-user", "root", "--operator", env=env, stdin=PASSWORD + "\n")
    assert made.returncode == 0, made.stderr
    async with serve(create_app(make_settings(sqlite_url))) as base_url:
        root = await login(base_url, "root")
        try:
            page = await root.get("/admin/users")
            assert page.status_code == 200 and 'id="users-table"' in page.text
            assert await _audit(root) == [(None, "user.create", "root")]
            assert (await root.get("/api/admin/audit")).json()[0]["detail"] == "operator"
        finally:
            await root.aclose()


async def test_a_disabled_owner_gets_no_compaction_ahead_of_time(
    database_url: str, chat_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> None:
    settings = chat_settings(database_url, **ahead.SIZES)
    app = create_app(settings)
    async with serve(app) as base_url:
        olga = await new_operator(base_url, database_url, "olga")
        dora = await new_user(base_url, "dora")
        try:
            backend = ahead.Backend(app, dora, database_url, ahead.Summaries(scripted_provider))
            # How many turns reach the pre-trigger, in a first conversation (its job runs).
            first, crossed_at = await ahead.until_ahead(backend, "first")
            turns = crossed_at // 2
            await backend.settled(first)
            backend.summaries.called.clear()
            # The same turns in a second one; its owner is disabled while the crossing one runs.
            cid = (await dora.post("/api/conversations", json={"title": "second"})).json()["id"]
            for turn in range(turns - 1):
                await ahead.send(dora, cid, f"Turn {turn}: " + WORDS * 40)
            slow = scripted_provider.default_reply
            scripted_provider.script(lambda body: slow(body).model_copy(update={"first_token_delay": 1.0}))
            crossing = await ahead.send(dora, cid, f"Turn {turns - 1}: " + WORDS * 40, wait=False)
            dora_id = await _user_id(olga, "dora")
            assert (await olga.post(f"/api/admin/users/{dora_id}/disable")).status_code == 200
            await app.state.ctx.runner.wait(crossing["turn_id"])
            await backend.settled(cid)
            assert not backend.summaries.called.is_set()
            assert await backend.rows(cid) == []
        finally:
            await olga.aclose()
            await dora.aclose()


async def test_a_send_authenticated_just_before_the_disabling_starts_no_turn(
    database_url: str, chat_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> None:
    app = create_app(chat_settings(database_url))
    async with serve(app) as base_url:
        olga = await new_operator(base_url, database_url, "olga")
        dora = await new_user(base_url, "dora")
        try:
            cid = (await dora.post("/api/conversations", json={"title": "raced"})).json()["id"]
            # The account as the send's authentication read it, a moment before the disabling.
            async with app.state.ctx.sessions() as db:
                authenticated = await db.scalar(select(User).where(User.username == "dora"))
            assert authenticated is not None
            assert (await olga.post(f"/api/admin/users/{authenticated.id}/disable")).status_code == 200
            with pytest.raises(Forbidden) as refused:
                await app.state.ctx.runner.send(authenticated, cid, "hello", [])
            assert refused.value.code == "account_disabled"
            async with app.state.ctx.sessions() as db:
                assert await db.scalar(select(Message.id).where(Message.conversation_id == cid)) is None
        finally:
            await olga.aclose()
            await dora.aclose()
