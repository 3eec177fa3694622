"""No message text, password, password hash, token or session secret in any log line, with every
logger at its most talkative (SQL statements included) through a login, a token's use, a turn
and a password change, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

import httpx
import pytest
from sqlalchemy import select

from backend.app import create_app
from backend.db import session_factory
from backend.models import User
from backend.settings import Settings
from tests.support.api import PASSWORD
from tests.support.databases import engine_for
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.servers import serve

QUESTION = "my locker combination is 7-31-4 zebra"
ANSWER = "noted: seven thirty-one four, zebra"
NEW_PASSWORD = "orbit lantern 9 quartz"


def _logged_text(caplog: pytest.LogCaptureFixture) -> str:
    lines = []
    for record in caplog.records:
        lines.append(record.getMessage())
        if record.exc_info:
            lines.append(logging.Formatter().formatException(record.exc_info))
    return "\n".join(lines)


async def _password_hash(database_url: str) -> str:
    async with engine_for(database_url) as engine, session_factory(engine)() as db:
        return (await db.scalars(select(User.password_hash))).one()


async def test_no_secret_reaches_a_log_line(
    database_url: str,
    chat_settings: Callable[..., Settings],
    scripted_provider: ScriptedProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.INFO, logger="sqlalchemy.engine")  # every statement, as echo=True would
    scripted_provider.script(text(ANSWER))
    app = create_app(chat_settings(database_url))
    async with serve(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        credentials = {"username": "dana", "password": PASSWORD}
        assert (await client.post("/api/auth/register", json=credentials)).status_code == 201
        wrong = await client.post("/api/auth/login", json={**credentials, "password": "not " + PASSWORD})
        assert wrong.status_code == 401
        login = await client.post("/api/auth/login", json=credentials)
        assert login.status_code == 200
        csrf = login.json()["csrf_token"]
        cookie = login.cookies["chat_shell_session"]
        client.headers["X-CSRF-Token"] = csrf
        token = (await client.post("/api/auth/tokens", json={"name": "ci"})).json()["token"]
        bearer = {"Authorization": f"Bearer {token}"}
        cid = (await client.post("/api/conversations", json={"title": "t"}, headers=bearer)).json()["id"]
        sent = await client.post(
            f"/api/conversations/{cid}/messages",
            json={"content": QUESTION},
            params={"wait": "true"},
            headers=bearer,
        )
        assert sent.json()["assistant_message"]["result"]["value"] == ANSWER
        changed = await client.post(
            "/api/auth/password", json={"current_password": PASSWORD, "new_password": NEW_PASSWORD}
        )
        assert changed.status_code == 204
    password_hash = await _password_hash(database_url)

    logged = _logged_text(caplog)
    secrets = {
        "message": QUESTION,
        "answer": ANSWER,
        "password": PASSWORD,
        "new password": NEW_PASSWORD,
        "password hash": password_hash,
        "old hash salt": password_hash.split("$")[-2],
        "API token": token,
        "token digest": hashlib.sha256(token.encode()).hexdigest(),
        "session cookie": cookie,
        "session digest": hashlib.sha256(cookie.encode()).hexdigest(),
        "CSRF token": csrf,
    }
    leaked = [name for name, secret in secrets.items() if secret in logged]
    assert not leaked, f"in the logs: {leaked}"
    # Statements were logged (the check would mean nothing otherwise), their parameters not.
    assert "INSERT INTO messages" in logged and "SQL parameters hidden" in logged
