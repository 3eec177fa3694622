"""Generated titles (issue 22, "Titles"), end to end over HTTP with the scripted provider.

A conversation the page creates with `generate_title` keeps its first line until its first
reply completes; then the summarizer's model names it in the background (a non-streamed call
with a bounded input), the title is cleaned of Markdown and stored as `generated`. A rename
wins over a title still being written; a failed call keeps the first line and the next reply
tries again; a conversation created with a title of its own is never renamed. Service mode
names conversations as package mode does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from backend.app import create_app
from backend.services.titles import GeneratedTitles
from backend.settings import Settings
from chat_shell.accounting.text_counter import TiktokenText
from chat_shell.titles import TITLE_INPUT_TOKENS, TITLE_OUTPUT_TOKENS
from tests.support.api import assistant_reply, signed_in
from tests.support.modes import OpenModes
from tests.support.scripted_provider import Reply, ScriptedProvider, content_text, http_error, text
from tests.support.servers import serve
from tests.support.uploads import upload_ok


async def _until(check: Callable[[], object], seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {seconds:g} s")


@dataclass
class Chat:
    client: httpx.AsyncClient
    app: FastAPI

    @property
    def titles(self) -> GeneratedTitles | None:
        return self.app.state.ctx.host.titles

    async def create(self, title: str, **body: Any) -> int:
        response = await self.client.post("/api/conversations", json={"title": title, **body})
        assert response.status_code == 201, response.text
        return int(response.json()["id"])

    async def send(self, cid: int, content: str) -> None:
        response = await self.client.post(
            f"/api/conversations/{cid}/messages", params={"wait": "true"}, json={"content": content}
        )
        assert response.status_code == 200, response.text

    async def title(self, cid: int) -> tuple[str, str]:
        """The settled conversation's title and where it came from (`user`, `fallback`, `generated`)."""
        shown = await self.shown(cid)
        return shown["title"], shown["title_source"]

    async def shown(self, cid: int) -> dict[str, Any]:
        """The conversation once its turns have ended and every title being written is stored."""
        await _until(
            lambda: not self.app.state.ctx.host.active
        )  # a title is scheduled as its turn's job ends
        if self.titles is not None:
            await self.titles.settled()
        return (await self.client.get(f"/api/conversations/{cid}")).json()


OpenChat = Callable[..., AbstractAsyncContextManager[Chat]]


@pytest.fixture
def open_chat(database_url: str, chat_settings: Callable[..., Settings]) -> OpenChat:
    @asynccontextmanager
    async def opener(**overrides: object) -> AsyncIterator[Chat]:
        app = create_app(chat_settings(database_url, **overrides))
        async with serve(app) as base_url, signed_in(base_url, "namer") as client:
            yield Chat(client, app)

    return opener


@pytest.fixture
async def chat(open_chat: OpenChat) -> AsyncIterator[Chat]:
    """The app with the default chat settings, and a signed-in user's client."""
    async with open_chat() as chat:
        yield chat


def _exchange(request: dict[str, Any]) -> str:
    return content_text(request["messages"][-1])


async def test_the_first_reply_names_the_conversation(
    chat: Chat, scripted_provider: ScriptedProvider
) -> None:
    cid = await chat.create("**Plan** a trip to Lisbon", generate_title=True)
    assert (await chat.shown(cid))["title_source"] == "fallback"
    scripted_provider.script(text("Lisbon in May is mild; book the tram tour early."))
    scripted_provider.script_titles(text('Title: **"Lisbon trip in May"**.'))
    await chat.send(cid, "**Plan** a trip to Lisbon in May for two")
    assert await chat.title(cid) == ("Lisbon trip in May", "generated")
    # One title call: not streamed, short, with the exchange in it; no chat request it took.
    [request] = scripted_provider.title_requests
    assert not request.get("stream")
    assert request.get("max_completion_tokens", request.get("max_tokens")) == TITLE_OUTPUT_TOKENS
    assert "a trip to Lisbon in May for two" in _exchange(request)
    assert "book the tram tour early" in _exchange(request)
    assert len(scripted_provider.requests) == 1
    # Later replies never rename it again.
    await chat.send(cid, "And in June?")
    assert (await chat.shown(cid))["title"] == "Lisbon trip in May"
    assert len(scripted_provider.title_requests) == 1


async def test_a_first_message_of_files_alone_is_named_from_their_names_and_the_reply(
    chat: Chat, scripted_provider: ScriptedProvider
) -> None:
    # The page titles such a chat with the file's name until the reply (it has no first line).
    cid = await chat.create("q3-budget.csv", generate_title=True)
    attachment = await upload_ok(
        chat.client, "q3-budget.csv", b"team,amount\nops,1200\n", conversation_id=cid
    )
    scripted_provider.script(text("The ops team spent 1,200 in Q3."))
    scripted_provider.script_titles(text("Q3 budget by team"))
    reply = await assistant_reply(chat.client, cid, "", attachment_ids=[attachment["id"]])
    assert reply["status"] == "completed"
    assert await chat.title(cid) == ("Q3 budget by team", "generated")
    [request] = scripted_provider.title_requests
    assert "User:\nFiles: q3-budget.csv\n" in _exchange(request)
    assert "The ops team spent 1,200 in Q3." in _exchange(request)


async def test_a_conversation_with_a_title_of_its_own_is_never_renamed(
    chat: Chat, scripted_provider: ScriptedProvider
) -> None:
    cid = await chat.create("Quarterly numbers")
    await chat.send(cid, "Summarize the quarter")
    assert await chat.title(cid) == ("Quarterly numbers", "user")
    assert scripted_provider.title_requests == []


async def test_a_rename_during_the_title_call_wins(chat: Chat, scripted_provider: ScriptedProvider) -> None:
    cid = await chat.create("first line", generate_title=True)
    scripted_provider.script_titles(Reply(text="Generated name", first_token_delay=1.0))
    await chat.send(cid, "first line")
    await _until(lambda: scripted_provider.title_requests)
    renamed = await chat.client.patch(f"/api/conversations/{cid}", json={"title": "My own name"})
    assert renamed.json()["title_source"] == "user"
    assert await chat.title(cid) == ("My own name", "user")


async def test_a_failed_title_call_keeps_the_first_line_and_the_next_reply_tries_again(
    chat: Chat, scripted_provider: ScriptedProvider
) -> None:
    cid = await chat.create("Why is the build red", generate_title=True)
    scripted_provider.script_titles(
        # A 400 (the client retries no 400), then an answer that cleans to nothing.
        http_error(400),
        text("```\n\n```"),
        text("Red build"),
    )
    await chat.send(cid, "Why is the build red")
    assert (await chat.shown(cid))["title"] == "Why is the build red"
    await chat.send(cid, "It fails in the linter")  # an answer with nothing left: no title
    assert (await chat.shown(cid))["title_source"] == "fallback"
    await chat.send(cid, "Still red")
    assert await chat.title(cid) == ("Red build", "generated")
    assert len(scripted_provider.title_requests) == 3


async def test_a_long_first_message_costs_a_bounded_title_call(
    chat: Chat, scripted_provider: ScriptedProvider
) -> None:
    cid = await chat.create("logs", generate_title=True)
    scripted_provider.script(text("reply " * 3000))
    await chat.send(cid, "line of a long log\n" * 5000)
    await chat.shown(cid)
    [request] = scripted_provider.title_requests
    assert TiktokenText().count(_exchange(request)) <= 2 * TITLE_INPUT_TOKENS + 16


async def test_with_generated_titles_off_the_first_line_stays(
    open_chat: OpenChat, scripted_provider: ScriptedProvider
) -> None:
    async with open_chat(generated_titles=False) as chat:
        cid = await chat.create("just this", generate_title=True)
        await chat.send(cid, "just this")
        assert await chat.title(cid) == ("just this", "user")
        assert scripted_provider.title_requests == []


async def test_service_mode_names_conversations_as_package_mode_does(
    open_modes: OpenModes, scripted_provider: ScriptedProvider
) -> None:
    async with open_modes() as modes:
        named = []
        for mode in (modes.package, modes.service):
            scripted_provider.reset()
            scripted_provider.script(text("Use a bisect."))
            scripted_provider.script_titles(text("Finding a *regression*"))
            made = await mode.client.post("/api/conversations", json={"title": "bug", "generate_title": True})
            cid = made.json()["id"]
            sent = await mode.client.post(
                f"/api/conversations/{cid}/messages", params={"wait": "true"}, json={"content": "bug hunt"}
            )
            assert sent.status_code == 200, sent.text
            for _ in range(200):  # the title is written in the background
                shown = (await mode.client.get(f"/api/conversations/{cid}")).json()
                if shown["title_source"] != "fallback":
                    break
                await asyncio.sleep(0.05)
            named.append((shown["title"], shown["title_source"], scripted_provider.title_requests[-1]))
    assert named[0][:2] == ("Finding a regression", "generated")
    assert named[0] == named[1]
