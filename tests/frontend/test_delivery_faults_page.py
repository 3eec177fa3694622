"""What the page shows when delivery meets a fault: a reply that restarted on another worker,
and a send the service cannot admit yet (503 with Retry-After)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import composer, last_assistant, start, stored, wait_finished
from tests.support.browser import (
    Stack,
    append_turn_events,
    assistant,
    seed_conversation,
    seed_running_turn,
    serve_fresh_stack,
    user,
)
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def stack(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A service that admits one turn at a time."""
    directory = tmp_path_factory.mktemp("admission")
    with serve_fresh_stack(sqlite_template, directory, turn_capacity=1) as served:
        yield served


def _running(stack: Stack, username: str, question: str) -> tuple[int, int, int]:
    cid = seed_conversation(stack.database_url, username, question, [user("Hi"), assistant("Hello.")])
    turn_id, reply_id = seed_running_turn(stack.database_url, cid, question)
    started = {"turn_id": turn_id, "message_id": reply_id, "model": "m", "profile": "m"}
    append_turn_events(stack.database_url, turn_id, [("turn.started", started)])
    return cid, turn_id, reply_id


def test_a_restarted_reply_replaces_its_partial_text_and_says_why(page: Page, stack: Stack) -> None:
    start(page, stack, "restarted")
    cid, turn_id, reply_id = _running(stack, "restarted", "Explain tides")
    append_turn_events(
        stack.database_url, turn_id, [("message.delta", {"text": "Tides are caused by the wi"})]
    )
    page.goto(f"{stack.base_url}/c/{cid}")
    reply = last_assistant(page)
    expect(reply).to_contain_text("Tides are caused by the wi")
    started = {"turn_id": turn_id, "message_id": reply_id, "model": "m", "profile": "m"}
    append_turn_events(
        stack.database_url,
        turn_id,
        [
            (
                "turn.restarted",
                {"code": "worker_lost", "message": "The reply restarted after a server fault."},
            ),
            ("turn.started", started),
            ("message.delta", {"text": "Tides come from the Moon's pull."}),
        ],
    )
    expect(reply).to_contain_text("Tides come from the Moon's pull.")
    expect(reply).not_to_contain_text("caused by the wi")
    expect(reply).to_contain_text("The reply restarted after a server fault.")
    # A reload replays the log from its start and shows the same.
    page.reload()
    reply = last_assistant(page)
    expect(reply).to_contain_text("Tides come from the Moon's pull.")
    expect(reply).not_to_contain_text("caused by the wi")
    append_turn_events(stack.database_url, turn_id, [], final={"status": "cancelled", **assistant("")})


def test_a_send_past_capacity_says_so_and_goes_through_once_there_is_room(page: Page, stack: Stack) -> None:
    client = start(page, stack, "patient")
    busy, turn_id, _ = _running(stack, "patient", "Someone else's long reply")
    page.goto(f"{stack.base_url}/")
    stack.provider.script(text("Here you are."))
    composer(page).fill("Is there room?")
    composer(page).press("Enter")
    status = page.locator("#composer-status")
    expect(status).to_contain_text("Trying again in 3 s")
    expect(status).to_contain_text("as many replies as it can")
    # Refused: nothing was stored, and the page keeps asking.
    conversations = client.get("/api/conversations").json()["items"]
    new = [c for c in conversations if c["id"] != busy]
    assert new and all(stored(client, c["id"]) == [] for c in new)
    # The other reply ends: the next try is admitted and answered.
    append_turn_events(stack.database_url, turn_id, [], final={"status": "completed", **assistant("Done.")})
    reply = wait_finished(page)
    expect(reply).to_contain_text("Here you are.")
    expect(page.locator(".msg.user").last).to_contain_text("Is there room?")
    expect(status).not_to_contain_text("Trying again")
    assert len(stack.provider.chat_requests) == 1
