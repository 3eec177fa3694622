"""Abuse limits as an attacker and an operator meet them: login and registration throttled per
client address and per username (429 + Retry-After, the client address only from a trusted
proxy), registration modes with invite codes, and the per-user limits."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from backend.app import create_app
from backend.db import create_engine, session_factory
from backend.models import InviteCode
from backend.services.accounts import auth
from backend.settings import Settings
from tests.support import databases
from tests.support.api import PASSWORD, login, new_operator, register, signed_in
from tests.support.modes import OpenModes
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.servers import serve
from tests.support.uploads import upload, upload_ok

ROOT = Path(__file__).resolve().parents[2]
WRONG = "not the password at all"


def _address() -> str:
    """A client address of its own (documentation range), so counts never meet across tests."""
    return f"198.18.{random.randrange(256)}.{random.randrange(1, 255)}"


@asynccontextmanager
async def _server(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(create_app(settings)) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        yield client


async def _login(client: httpx.AsyncClient, username: str, password: str, address: str) -> httpx.Response:
    return await client.post(
        "/api/auth/login",
        json={"username": username, "password": password},
        headers={"X-Forwarded-For": address},
    )


def _throttled(response: httpx.Response) -> bool:
    if response.status_code != 429:
        return False
    assert response.json()["code"] == "too_many_attempts"
    assert 1 <= int(response.headers["Retry-After"]) <= 3600
    return True


@pytest.fixture
def throttled_settings(sqlite_url: str, make_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    def factory(**overrides: object) -> Settings:
        values: dict[str, object] = {
            "throttle_address_rate": "10/minute",
            "throttle_username_rate": "20/hour",
            "trusted_proxies": "127.0.0.1",
        }
        return make_settings(sqlite_url, **{**values, **overrides})

    return factory


async def test_the_eleventh_failed_login_in_a_minute_is_refused_and_others_still_log_in(
    throttled_settings: Callable[..., Settings],
) -> None:
    async with _server(throttled_settings()) as client:
        await register(client, "alice")
        attacker, owner = _address(), _address()
        for _ in range(10):
            assert (await _login(client, "alice", WRONG, attacker)).status_code == 401
        refused = await _login(client, "alice", WRONG, attacker)
        assert _throttled(refused), refused.text
        # Even the right password: the attacker's address waits.
        assert _throttled(await _login(client, "alice", PASSWORD, attacker))
        # The owner, from another address, logs in as usual.
        assert (await _login(client, "alice", PASSWORD, owner)).status_code == 200


@pytest.mark.parametrize("trusted", ["", "192.0.2.1"], ids=["no proxy", "another proxy"])
async def test_a_forged_forwarded_for_from_an_untrusted_peer_does_not_dodge_the_limit(
    throttled_settings: Callable[..., Settings], trusted: str
) -> None:
    async with _server(throttled_settings(trusted_proxies=trusted)) as client:
        await register(client, "alice")
        for _ in range(10):
            assert (await _login(client, "alice", WRONG, _address())).status_code == 401
        assert _throttled(await _login(client, "alice", WRONG, _address()))


async def test_one_username_is_limited_across_addresses(throttled_settings: Callable[..., Settings]) -> None:
    async with _server(throttled_settings(throttle_username_rate="3/hour")) as client:
        await register(client, "alice")
        for _ in range(3):
            assert (await _login(client, "alice", WRONG, _address())).status_code == 401
        refused = await _login(client, "ALICE ", WRONG, _address())
        assert _throttled(refused) and "username" in refused.json()["message"]
        # Other accounts are not affected.
        await register(client, "bob")
        assert (await _login(client, "bob", PASSWORD, _address())).status_code == 200


async def test_registration_is_throttled_per_address(throttled_settings: Callable[..., Settings]) -> None:
    async with _server(throttled_settings(throttle_address_rate="2/minute")) as client:
        address = _address()
        for name in ("one", "two"):
            response = await client.post(
                "/api/auth/register",
                json={"username": name, "password": PASSWORD},
                headers={"X-Forwarded-For": address},
            )
            assert response.status_code == 201
        third = await client.post(
            "/api/auth/register",
            json={"username": "three", "password": PASSWORD},
            headers={"X-Forwarded-For": address},
        )
        assert _throttled(third)


async def test_with_redis_every_replica_counts_the_same_attempts(
    throttled_settings: Callable[..., Settings],
) -> None:
    settings = throttled_settings(throttle_address_rate="3/minute", redis_url="redis://127.0.0.1:6379/0")
    attacker = _address()
    async with _server(settings) as first, _server(settings) as second:
        await register(first, "alice")
        assert (await _login(first, "alice", WRONG, attacker)).status_code == 401
        assert (await _login(second, "alice", WRONG, attacker)).status_code == 401
        assert (await _login(first, "alice", WRONG, attacker)).status_code == 401
        assert _throttled(await _login(second, "alice", WRONG, attacker))


# -- registration modes -----------------------------------------------------------------------


async def _register(client: httpx.AsyncClient, username: str, code: str | None = None) -> httpx.Response:
    body = {"username": username, "password": PASSWORD, **({"invite_code": code} if code else {})}
    return await client.post("/api/auth/register", json=body)


async def test_open_registration_needs_no_code(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    async with _server(make_settings(sqlite_url, registration="open")) as client:
        assert (await _register(client, "alice")).status_code == 201
        page = await client.get("/register")
        assert page.status_code == 200 and 'name="invite_code"' not in page.text
        assert 'href="/register"' in (await client.get("/login")).text


async def test_closed_registration_refuses_and_the_page_says_so(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    async with _server(make_settings(sqlite_url, registration="closed")) as client:
        refused = await _register(client, "alice")
        assert refused.status_code == 403 and refused.json()["code"] == "registration_closed"
        page = await client.get("/register")
        assert page.status_code == 404 and "Registration is closed" in page.text
        assert "<form" not in page.text
        login_page = (await client.get("/login")).text
        assert 'href="/register"' not in login_page and "Ask an operator" in login_page


async def test_invite_registration_takes_one_operator_code_once(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(sqlite_url, registration="invite")
    async with serve(create_app(settings)) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        page = await client.get("/register")
        assert page.status_code == 200 and 'name="invite_code"' in page.text
        missing = await _register(client, "alice")
        assert missing.status_code == 403 and missing.json()["code"] == "invite_required"
        bogus = await _register(client, "alice", "inv_made-up")
        assert bogus.status_code == 403 and bogus.json()["code"] == "invalid_invite"

        # The first operator comes from the CLI; operators make codes over the API.
        engine = create_engine(sqlite_url)
        async with session_factory(engine)() as db, db.begin():
            await auth.create_user(db, auth.Passwords("CHEAPEST"), "root", PASSWORD, operator=True)
        operator = await login(base_url, "root")
        made = await operator.post("/api/auth/invites", json={})
        assert made.status_code == 201, made.text
        code = made.json()["code"]
        assert (await _register(client, "alice", code)).status_code == 201
        again = await _register(client, "bob", code)
        assert again.status_code == 403 and again.json()["code"] == "invalid_invite"

        # A user who is not an operator makes none.
        alice = await login(base_url, "alice")
        assert (await alice.post("/api/auth/invites", json={})).status_code == 403

        # An expired code is refused.
        expired = (await operator.post("/api/auth/invites", json={"days": 1})).json()["code"]
        async with session_factory(engine)() as db, db.begin():
            await db.execute(update(InviteCode).values(expires_at=InviteCode.created_at))
        late = await _register(client, "carol", expired)
        assert late.status_code == 403 and late.json()["code"] == "invalid_invite"
        await engine.dispose()
        await operator.aclose()
        await alice.aclose()


def _invite_from_cli(sqlite_url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CHAT_SHELL_")},
        "PYTHONPATH": str(ROOT),
        "CHAT_SHELL_DATABASE_URL": sqlite_url,
        "CHAT_SHELL_REGISTRATION": "invite",
    }
    return subprocess.run(
        [sys.executable, "-m", "backend.cli", "invite", "create", "--days", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_chat_shell_invite_create_prints_a_working_code(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = make_settings(sqlite_url, registration="invite")
    made = await asyncio.to_thread(_invite_from_cli, sqlite_url, tmp_path)
    assert made.returncode == 0, made.stderr
    code = made.stdout.strip()
    assert code.startswith("inv_") and "valid until" in made.stderr
    async with _server(settings) as client:
        assert (await _register(client, "alice", code)).status_code == 201


async def test_an_operator_made_before_invite_mode_can_still_sign_in(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """Switching to invite mode keeps every existing account working."""
    async with serve(create_app(make_settings(sqlite_url))) as base_url:
        operator = await new_operator(base_url, sqlite_url, "root")
        await operator.aclose()
    async with serve(create_app(make_settings(sqlite_url, registration="invite"))) as base_url:
        operator = await login(base_url, "root")
        assert (await operator.post("/api/auth/invites", json={})).status_code == 201
        await operator.aclose()


# -- per-user limits --------------------------------------------------------------------------


async def _conversation(client: httpx.AsyncClient) -> int:
    response = await client.post("/api/conversations", json={"title": "x"})
    assert response.status_code == 201
    return int(response.json()["id"])


async def _send(client: httpx.AsyncClient, cid: int, content: str = "hi", **params: str) -> httpx.Response:
    return await client.post(f"/api/conversations/{cid}/messages", json={"content": content}, params=params)


async def test_running_turns_at_once_are_limited_per_user_across_conversations(
    sqlite_url: str, chat_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> None:
    settings = chat_settings(sqlite_url, max_running_turns=2)
    scripted_provider.script(text("", hang=True), text("", hang=True), text("third"), text("other"))
    async with serve(create_app(settings)) as base_url, signed_in(base_url, "alice") as alice:
        first, second, third = [await _conversation(alice) for _ in range(3)]
        assert (await _send(alice, first)).status_code == 202
        assert (await _send(alice, second)).status_code == 202
        refused = await _send(alice, third)
        assert refused.status_code == 429 and refused.json()["code"] == "too_many_running_turns"
        assert int(refused.headers["Retry-After"]) >= 1
        # Nothing of the refused send was stored.
        assert (await alice.get(f"/api/conversations/{third}/messages")).json()["items"] == []
        # Another user is not affected by alice's turns.
        async with signed_in(base_url, "bob") as bob:
            assert (await _send(bob, await _conversation(bob), wait="true")).status_code == 200
        # One stopped: a slot is free again.
        assert (await alice.post(f"/api/conversations/{first}/stop")).status_code == 202
        for _ in range(100):
            answer = await _send(alice, third, wait="true")
            if answer.status_code != 429:
                break
            await asyncio.sleep(0.1)
        assert answer.status_code == 200, answer.text
        scripted_provider.close()


@pytest.mark.postgres
async def test_concurrent_sends_on_two_replicas_never_exceed_the_running_turns_limit(
    postgres_url: str, chat_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> None:
    """Sends of one user raced on two backends of one PostgreSQL database: each send counts the
    user's running turns only after the previous one committed, so exactly the limit runs."""
    await databases.truncate_all(postgres_url)
    settings = chat_settings(postgres_url, max_running_turns=2)
    scripted_provider.script(*[text("", hang=True) for _ in range(8)])
    app_a, app_b = create_app(settings), create_app(settings)
    async with serve(app_a) as url_a, serve(app_b) as url_b, signed_in(url_a, "alice") as on_a:
        on_b = await login(url_b, "alice")
        try:
            conversations = [await _conversation(on_a) for _ in range(8)]
            answers = await asyncio.gather(
                *[_send(on_a if i % 2 else on_b, cid) for i, cid in enumerate(conversations)]
            )
            codes = sorted(answer.status_code for answer in answers)
            assert codes == [202, 202] + [429] * 6, [a.text for a in answers]
        finally:
            await on_b.aclose()
            scripted_provider.close()


async def test_a_turn_past_its_wall_time_ends_failed_with_its_partial_text_in_both_modes(
    open_modes: OpenModes, scripted_provider: ScriptedProvider
) -> None:
    """In package mode and with the runtime as its own service: the reply stops at the limit,
    says why, keeps what it wrote, and the conversation takes the next message. The limit leaves
    the next turn room: under CI's load a whole turn over the runtime service once took over 1 s."""
    async with open_modes(turn_max_seconds=3) as modes:
        for mode in (modes.package, modes.service):
            scripted_provider.reset()
            scripted_provider.script(text("written before the limit", hang=True), text("next answer"))
            cid = await _conversation(mode.client)
            answer = await _send(mode.client, cid, wait="true")
            assert answer.status_code == 200, (mode.name, answer.text)
            reply = answer.json()["assistant_message"]
            assert reply["status"] == "failed", (mode.name, reply)
            assert reply["result"]["error"]["code"] == "turn_time_limit"
            assert "time limit of 3 s" in reply["result"]["error"]["message"]
            assert reply["result"]["termination_reason"] == "time_limit"
            assert reply["result"]["value"] == "written before the limit", mode.name
            following = await _send(mode.client, cid, "again", wait="true")
            assert following.status_code == 200, (mode.name, following.text)
            assert following.json()["assistant_message"]["status"] == "completed", mode.name
            assert following.json()["assistant_message"]["result"]["value"] == "next answer"
    scripted_provider.close()


async def test_open_streams_are_limited_per_user(
    sqlite_url: str, chat_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> None:
    settings = chat_settings(sqlite_url, max_open_streams=2, sse_ping_seconds=0.5)
    scripted_provider.script(text("still writing", hang=True))
    async with serve(create_app(settings)) as base_url, signed_in(base_url, "alice") as alice:
        cid = await _conversation(alice)
        assert (await _send(alice, cid)).status_code == 202
        path = f"/api/conversations/{cid}/stream"
        async with alice.stream("GET", path) as one, alice.stream("GET", path) as two:
            assert (one.status_code, two.status_code) == (200, 200)
            refused = await alice.get(path)
            assert refused.status_code == 429 and refused.json()["code"] == "too_many_streams"
        # Both closed: their slots are back.
        for _ in range(50):
            async with alice.stream("GET", path) as again:
                if again.status_code == 200:
                    break
            await asyncio.sleep(0.1)
        assert again.status_code == 200
        assert (await alice.post(f"/api/conversations/{cid}/stop")).status_code == 202
    scripted_provider.close()


async def test_stored_attachment_bytes_are_limited_per_user(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    async with (
        serve(create_app(make_settings(sqlite_url, max_stored_bytes=1000))) as base_url,
        signed_in(base_url, "alice") as alice,
        signed_in(base_url, "bob") as bob,
    ):
        kept = await upload_ok(alice, "a.txt", b"a" * 600)
        refused = await upload(alice, "b.txt", b"b" * 500)
        assert refused.status_code == 413 and refused.json()["code"] == "storage_quota_exceeded"
        # Nothing of the refused file was kept.
        assert (await alice.get(f"/api/attachments/{kept['id'] + 1}")).status_code == 404
        await upload_ok(bob, "b.txt", b"b" * 500)  # each user has their own room
        assert (await alice.delete(f"/api/attachments/{kept['id']}")).status_code == 204
        await upload_ok(alice, "b.txt", b"b" * 500)
