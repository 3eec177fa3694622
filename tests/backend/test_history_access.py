"""What a remote chat_shell reads through a turn capability, compared with package mode's
in-process readers: the history tools' pages (bounded, contiguous, owner-scoped) and
attachments (describe, read, tail, and every error the model may be shown)."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from langchain_core.tools import ToolException
from sqlalchemy import select

from backend.models import Message, User
from backend.services.attachments.reader import DatabaseAttachmentReader
from backend.services.records.originals import DatabaseHistoryBrowser, readable_text
from backend.settings import Settings
from chat_shell.accounting.text_counter import TiktokenText
from chat_shell.contracts import BackendAccess, HistoryBrowser
from chat_shell.host.api import BackendApi
from chat_shell.host.remote import RemoteAttachmentReader, RemoteHistoryBrowser
from chat_shell.tools.history_tools import HistoryToolSession, list_history, read_message
from chat_shell.tools.pages import MESSAGE_OVERHEAD_TOKENS
from tests.support.api import new_user, serve_with_owner
from tests.support.attachments import count_tokens
from tests.support.capabilities import CAPABILITY_KEY, capability, running_turn
from tests.support.files import corrupt, docx_bytes, log_bytes
from tests.support.history import Seeder, ai, around_a_tool, call, retained, summary, tool, tool_block
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.uploads import upload_ok


@dataclass
class Backend:
    base_url: str
    owner: httpx.AsyncClient
    owner_id: int
    settings: Settings
    sessions: Any
    http: httpx.AsyncClient

    async def remote_api(self, conversation_id: int) -> BackendApi:
        """What chat_shell reads with during a turn of the conversation: its capability."""
        turn_id = await running_turn(self.sessions, conversation_id)
        token = capability(turn_id, conversation_id, self.owner_id)
        return BackendApi(self.http, BackendAccess(base_url=self.base_url, capability=token))


@pytest.fixture
async def backend(sqlite_url: str, chat_settings: Callable[..., Settings]) -> AsyncIterator[Backend]:
    settings = chat_settings(sqlite_url, capability_key=CAPABILITY_KEY)
    async with (
        serve_with_owner(settings, "owner") as (base_url, owner, sessions),
        httpx.AsyncClient() as http,
    ):
        async with sessions() as db:
            owner_id = await db.scalar(select(User.id).where(User.username == "owner"))
        assert owner_id is not None
        yield Backend(base_url, owner, owner_id, settings, sessions, http)


async def _outcome(pending: Awaitable[Any]) -> Any:
    """A reader's answer, or the words of its LookupError (what the model would be shown)."""
    try:
        return await pending
    except LookupError as exc:
        return ("LookupError", str(exc))


# -- the history tools ------------------------------------------------------------------------


def _noisy_output(size: int) -> str:
    rng = random.Random(5)
    alphabet = ['"', "\\", "\n", "\t", "\x01", "é", "京", "😀", "a", "b", " ", "{", "}"]
    return "".join(rng.choice(alphabet) for _ in range(size))


async def _seed_long_conversation(backend: Backend) -> tuple[int, int]:
    """A conversation with a checkpoint and one huge assistant message; (conversation, message_id)."""
    async with backend.sessions() as db, db.begin():
        owner = await db.get_one(User, backend.owner_id)
        seeder = Seeder(db, owner)
        c = await seeder.conversation("long")
        for index in range(60):
            await seeder.turn(c, f"question {index} " + "words " * 80, ai(f"answer {index}"))
        output = _noisy_output(120_000)
        await seeder.turn(
            c,
            "run the big report",
            ai("Running.", call("call_big", rows=50_000)),
            tool("call_big", "[compact]", compacted=True),
            ai("Done."),
            **around_a_tool("Running.", tool_block("call_big", output), "Done."),
        )
        big = c.next_message_id - 1
        await seeder.turn(c, "summarize", summary("S"), retained("user", "summarize"), ai("ok"))
        await seeder.turn(c, "current", ai("..."))
        return c.id, big


def _session(
    browser: HistoryBrowser, conversation_id: int, budget: int, before: int = 10_000
) -> HistoryToolSession:
    return HistoryToolSession(
        conversation_id, before, browser, lambda _: budget, TiktokenText(), max_calls=500
    )


async def _read_all(session: HistoryToolSession, message_id: int) -> tuple[str, list[dict[str, Any]]]:
    pieces, results, offset = [], [], 0
    while True:
        raw = await read_message(session, message_id, offset)
        assert count_tokens(raw) + MESSAGE_OVERHEAD_TOKENS <= session.budget_tokens("read_message")
        result = json.loads(raw)
        assert result["offset"] == offset and result["chars_read"] == len(result["content"])
        results.append(result)
        pieces.append(result["content"])
        if not result["has_more"]:
            assert result["next_offset"] is None
            return "".join(pieces), results
        assert result["next_offset"] == offset + len(result["content"])
        offset = result["next_offset"]


async def test_read_message_pages_a_huge_original_within_budget_identically_in_both_modes(
    backend: Backend,
) -> None:
    cid, big = await _seed_long_conversation(backend)
    package = _session(DatabaseHistoryBrowser(backend.sessions), cid, 4_000)
    remote = _session(RemoteHistoryBrowser(await backend.remote_api(cid)), cid, 4_000)
    text_package, pages = await _read_all(package, big)
    text_remote, remote_pages = await _read_all(remote, big)
    assert pages == remote_pages
    async with backend.sessions() as db:
        row = await db.scalar(
            select(Message).where(Message.conversation_id == cid, Message.message_id == big)
        )
        assert row is not None
        assert text_package == text_remote == readable_text(row)
    assert "[tool call: generate_report {}]" in text_package
    assert text_package.endswith("[end of tool output]\n\nDone.")  # one break between the parts
    assert len(pages) > 10
    # Pages are full: each holds close to the budget, not a timid fraction of it.
    assert min(count_tokens(json.dumps(p, ensure_ascii=False)) for p in pages[:-1]) > 3_000

    limited = json.loads(await read_message(package, big, offset=5, limit=7))
    assert (limited["offset"], len(limited["content"]), limited["next_offset"]) == (5, 7, 12)
    with pytest.raises(ToolException, match="past the end"):
        await read_message(package, big, offset=10**9)


async def test_list_history_pages_back_through_everything_without_gaps(backend: Backend) -> None:
    cid, big = await _seed_long_conversation(backend)
    current = big + 5  # the turn after "current"
    for browser in (
        DatabaseHistoryBrowser(backend.sessions),
        RemoteHistoryBrowser(await backend.remote_api(cid)),
    ):
        session = _session(browser, cid, 15_000, before=current)
        seen: list[tuple[int, bool]] = []
        before = None
        while True:
            page = json.loads(await list_history(session, before, 50))
            seen = [(m["message_id"], m["summarized"]) for m in page["messages"]] + seen
            assert all(len(m["snippet"]) <= 160 for m in page["messages"])
            if not page["has_more"]:
                break
            before = page["next_before_message_id"]
        checkpoint = big + 2
        assert seen == [(number, number <= checkpoint) for number in range(1, current)]


async def test_list_history_drops_the_oldest_items_to_fit_a_small_budget(backend: Backend) -> None:
    cid, big = await _seed_long_conversation(backend)
    session = _session(DatabaseHistoryBrowser(backend.sessions), cid, 600, before=big)
    raw = await list_history(session, None, 50)
    page = json.loads(raw)
    assert count_tokens(raw) + MESSAGE_OVERHEAD_TOKENS <= 600
    ids = [m["message_id"] for m in page["messages"]]
    assert 1 <= len(ids) < 50 and ids[-1] == big - 1
    # Nothing is skipped: the next page continues right before the oldest item shown.
    assert page["next_before_message_id"] == ids[0]


async def test_the_history_tools_read_only_their_own_conversation(backend: Backend) -> None:
    cid, big = await _seed_long_conversation(backend)
    mine = (await backend.owner.post("/api/conversations", json={"title": "other"})).json()["id"]
    stranger = await new_user(backend.base_url, "stranger")
    theirs = (await stranger.post("/api/conversations", json={"title": "theirs"})).json()["id"]
    await stranger.aclose()
    # A capability for one conversation cannot be pointed at another, even of the same owner.
    wrong = RemoteHistoryBrowser(await backend.remote_api(mine))
    with pytest.raises(LookupError):
        await wrong.read(cid, 1, 0, 100)
    with pytest.raises(LookupError):
        await wrong.outline(cid, None, 5)
    for target in (mine, theirs):
        misdirected = RemoteHistoryBrowser(await backend.remote_api(cid))
        with pytest.raises(LookupError):
            await misdirected.read(target, 1, 0, 100)
    # Messages of another conversation are not addressable from this one.
    session = _session(DatabaseHistoryBrowser(backend.sessions), mine, 15_000)
    with pytest.raises(ToolException, match="not part of this conversation"):
        await read_message(session, big)
    limited = HistoryToolSession(
        cid, 10_000, DatabaseHistoryBrowser(backend.sessions), lambda _: 15_000, TiktokenText(), max_calls=1
    )
    await list_history(limited)
    with pytest.raises(ToolException, match="at most 1 times per turn"):
        await list_history(limited)


# -- attachments ------------------------------------------------------------------------------


async def test_the_remote_attachment_reader_reads_what_the_package_reader_reads(
    backend: Backend, scripted_provider: ScriptedProvider
) -> None:
    client = backend.owner
    cid = (await client.post("/api/conversations", json={"title": "files"})).json()["id"]
    other = (await client.post("/api/conversations", json={"title": "elsewhere"})).json()["id"]
    log = (await upload_ok(client, "server.log", log_bytes(1_500_000), conversation_id=cid))["id"]
    broken = (await upload_ok(client, "broken.docx", corrupt(docx_bytes(["x"])), conversation_id=cid))["id"]
    gone = (await upload_ok(client, "gone.txt", b"soon deleted\n", conversation_id=cid))["id"]
    foreign = (await upload_ok(client, "foreign.txt", b"other conversation\n", conversation_id=other))["id"]
    scripted_provider.script(text("seen"))
    sent = await client.post(
        f"/api/conversations/{cid}/messages",
        json={"content": "files", "attachment_ids": [log, gone]},
        params={"wait": "true"},
    )
    assert sent.status_code == 200, sent.text
    assert (await client.delete(f"/api/attachments/{gone}")).status_code == 204
    fork = (await client.post(f"/api/conversations/{cid}/fork", json={"message_id": 2})).json()["id"]

    package = DatabaseAttachmentReader(backend.sessions, backend.settings)
    checks: list[tuple[str, tuple[int, ...]]] = [
        ("describe", ()),
        ("read", (0, 100)),
        ("read", (1_234, 1_200_000)),  # more than one HTTP page
        ("read", (10**9, 10)),
        ("tail", (300,)),
        ("tail", (0,)),
    ]
    for conversation in (cid, fork):
        remote = RemoteAttachmentReader(await backend.remote_api(conversation))
        for attachment in (log, broken, gone, foreign, 987_654):
            for method, args in checks:
                answers = [
                    await _outcome(getattr(reader, method)(conversation, attachment, *args))
                    for reader in (package, remote)
                ]
                assert answers[0] == answers[1], (conversation, attachment, method, args)
    # The answers differ by case: the log reads, the rest tell the model why not.
    remote = RemoteAttachmentReader(await backend.remote_api(cid))
    assert len((await remote.read(cid, log, 1_234, 1_200_000)).text) == 1_200_000
    assert "deleted" in (await _outcome(remote.read(cid, gone, 0, 10)))[1]
    assert (await remote.describe(cid, broken)).status == "failed"
