"""Browser harness shared by the browser tests and the frontend benchmark.

Headless Debian Chromium driven by Playwright's sync API (never a browser downloaded by Playwright), the
backend and the scripted provider served on loopback ports from background threads, and direct
database seeding for states a scripted run cannot reach quickly (long conversations, stored
compaction records).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
from playwright.sync_api import Browser, Page, Playwright
from sqlalchemy import insert, select

from backend.app import create_app
from backend.db import create_engine, session_factory
from backend.models import Conversation, Message, Turn, TurnEvent, TurnStatus, User
from backend.models.base import utcnow
from backend.settings import Settings
from tests.support import databases
from tests.support.api import LOOPBACK_TLS, PASSWORD, ROOMY_LIMITS
from tests.support.scripted_provider import ScriptedProvider
from tests.support.threaded_server import serve_in_thread

T = TypeVar("T")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch_chromium(playwright: Playwright) -> Browser:
    # Playwright gives every launch a fresh temporary profile (user-data dir).
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


@dataclass(frozen=True)
class Stack:
    base_url: str
    database_url: str
    provider: ScriptedProvider


@contextmanager
def serve_stack(
    database_url: str,
    data_dir: Path,
    *,
    models: Callable[[str], Path] | None = None,
    **settings: Any,
) -> Iterator[Stack]:
    """The scripted provider and the backend (package mode) on loopback ports, in threads.
    `models` writes a models file (CHAT_SHELL_MODELS) given the scripted provider's URL."""
    provider = ScriptedProvider()
    with serve_in_thread(provider.app) as provider_url:
        provider.base_url = f"{provider_url}/v1"
        if models is not None:
            settings["models"] = models(provider.base_url)
        values: dict[str, Any] = {
            "data_dir": data_dir,
            "database_url": database_url,
            "local_model": "off",
            "openai_base_url": provider.base_url,
            "telemetry_enabled": False,
            "sse_ping_seconds": 1.0,
            **ROOMY_LIMITS,
        }
        values.update(settings)
        app = create_app(Settings(_env_file=None, **values))  # type: ignore[call-arg]
        with serve_in_thread(app) as base_url:
            yield Stack(base_url, database_url, provider)


@contextmanager
def serve_fresh_stack(sqlite_template: Path, directory: Path, **settings: Any) -> Iterator[Stack]:
    """`serve_stack` on a new copy of the migrated SQLite template, its files in `directory`."""
    with serve_stack(
        databases.sqlite_copy(sqlite_template, directory), directory / "data", **settings
    ) as served:
        yield served


def api_client(base_url: str, username: str, *, register: bool = True) -> httpx.Client:
    """A logged-in API client (session cookie and CSRF header), for setup and checks."""
    client = httpx.Client(base_url=base_url, timeout=30, verify=LOOPBACK_TLS)
    if register:
        response = client.post("/api/auth/register", json={"username": username, "password": PASSWORD})
        assert response.status_code == 201, response.text
    response = client.post("/api/auth/login", json={"username": username, "password": PASSWORD})
    assert response.status_code == 200, response.text
    client.headers["X-CSRF-Token"] = response.json()["csrf_token"]
    return client


def log_in(page: Page, base_url: str, username: str, path: str = "/") -> None:
    """Logs a browser page in through the login form and lands on `path`."""
    page.goto(f"{base_url}/login?next={path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base_url}{path}")


async def _seed(database_url: str, username: str, title: str, messages: Sequence[dict[str, Any]]) -> int:
    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as db, db.begin():
            owner = await db.scalar(select(User.id).where(User.username == username))
            assert owner is not None, f"no user {username}"
            conversation = Conversation(owner_id=owner, title=title, next_message_id=len(messages) + 1)
            db.add(conversation)
            await db.flush()
            start = utcnow() - timedelta(seconds=len(messages))
            rows = [
                {
                    "conversation_id": conversation.id,
                    "message_id": index + 1,
                    "role": message["role"],
                    "status": message.get("status", "completed"),
                    "content": message.get("content", ""),
                    "result": message.get("result"),
                    "created_at": start + timedelta(seconds=index),
                    "updated_at": start + timedelta(seconds=index),
                }
                for index, message in enumerate(messages)
            ]
            for chunk in range(0, len(rows), 500):
                await db.execute(insert(Message), rows[chunk : chunk + 500])
            await databases.chain_messages(db, conversation.id)
            return conversation.id
    finally:
        await engine.dispose()


def run_off_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs database work on its own loop in a worker thread: Playwright's sync API keeps an
    event loop registered on the main thread, where `asyncio.run` is refused."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def seed_conversation(
    database_url: str, username: str, title: str, messages: Sequence[dict[str, Any]]
) -> int:
    """Stores a finished conversation directly (user/assistant dicts with `content`/`result`)."""
    return run_off_loop(_seed(database_url, username, title, messages))


async def _running_turn(database_url: str, conversation_id: int, question: str) -> tuple[int, int]:
    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as db, db.begin():
            conversation = await db.get_one(Conversation, conversation_id)
            number = conversation.next_message_id
            conversation.next_message_id = number + 2
            asked = Message(
                conversation_id=conversation_id,
                message_id=number,
                role="user",
                content=question,
                parent_pk=conversation.current_leaf_pk,
            )
            db.add(asked)
            await db.flush()
            reply = Message(
                conversation_id=conversation_id,
                message_id=number + 1,
                role="assistant",
                status="running",
                result={"value": "", "blocks": []},
                parent_pk=asked.id,
            )
            db.add(reply)
            await db.flush()
            conversation.current_leaf_pk = reply.id
            # Another runner id: this process's runner never touches the turn; the test drives it.
            turn = Turn(
                conversation_id=conversation_id,
                user_message_pk=asked.id,
                assistant_message_pk=reply.id,
                status=TurnStatus.RUNNING,
            )
            db.add(turn)
            await db.flush()
            return turn.id, reply.message_id
    finally:
        await engine.dispose()


async def _append_events(
    database_url: str,
    turn_id: int,
    events: Sequence[tuple[str, dict[str, Any]]],
    final: dict[str, Any] | None,
) -> None:
    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as db, db.begin():
            turn = await db.get_one(Turn, turn_id)
            seq = turn.last_seq
            for name, data in events:
                seq += 1
                db.add(TurnEvent(turn_id=turn_id, seq=seq, event=name, data=data))
            turn.last_seq = seq
            if final is not None:
                message = await db.get_one(Message, turn.assistant_message_pk)
                message.status = final["status"]
                message.result = final["result"]
                turn.status = final["status"]
                turn.ended_at = utcnow()
    finally:
        await engine.dispose()


def seed_running_turn(database_url: str, conversation_id: int, question: str) -> tuple[int, int]:
    """A turn left running by some runner, with no events yet; returns (turn id, reply message_id).
    The test then plays the runtime's part by appending events to its log."""
    return run_off_loop(_running_turn(database_url, conversation_id, question))


def append_turn_events(
    database_url: str,
    turn_id: int,
    events: Sequence[tuple[str, dict[str, Any]]],
    final: dict[str, Any] | None = None,
) -> None:
    """Appends numbered events to a turn's durable log (listeners pick them up from the log);
    `final` ({status, result}) also finishes the turn and its message, as the backend does."""
    run_off_loop(_append_events(database_url, turn_id, events, final))


def complete_turn(
    database_url: str,
    ids: tuple[int, int, int],
    last_text: str,
    result: dict[str, Any],
    events: Sequence[tuple[str, dict[str, Any]]] = (),
) -> None:
    """Ends a turn seeded running (`ids`: conversation, turn, reply message_id) as the backend
    does: `events`, the last text, then `turn.completed` with the stored message."""
    cid, turn_id, reply_id = ids
    message = {
        "conversation_id": cid,
        "message_id": reply_id,
        "role": "assistant",
        "status": "completed",
        "content": "",
        "result": result,
    }
    append_turn_events(
        database_url,
        turn_id,
        [*events, ("message.delta", {"text": last_text}), ("turn.completed", {"message": message})],
        final={"status": "completed", "result": result},
    )


def assistant(text: str, **result: Any) -> dict[str, Any]:
    blocks = [{"type": "text", "text": text}]
    return {"role": "assistant", "result": {"value": text, "blocks": blocks, **result}}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}
