"""Compaction in the browser: the boundary in the transcript, and the meter's compacting state,
including after a reload in the middle of a compaction (Wegent's weak point 14).

Most tests feed the page the event contract: stored messages holding a compaction record, and a
running turn whose durable log the test writes (the page reads it through the real resumable
stream). The last one runs a real summary compaction end to end.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import (
    ahead_trigger,
    compacted_reply,
    compaction_record,
    conversation_id,
    last_assistant,
    meter_used,
    metrics,
    send,
    start,
    stored,
    wait_finished,
)
from tests.frontend.conftest import screenshot
from tests.support.browser import (
    Stack,
    append_turn_events,
    assistant,
    complete_turn,
    seed_conversation,
    seed_running_turn,
    user,
)
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser

SUMMARY = (
    "Summary of earlier turns: the user plans a 5-day trip to Kyoto in April with a budget of "
    "1,200 EUR; no flights before 9:00; wants temples and a tea ceremony."
)


def early_turns(count: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for n in range(count):
        turns += [user(f"Question {n} about Kyoto"), assistant(f"Answer {n} about Kyoto.")]
    return turns


def test_the_boundary_shows_where_earlier_messages_were_summarized(
    page: Page, stack: Stack, username: str
) -> None:
    start(page, stack, username)
    done = compaction_record("completed", after_tokens=1500, summary_text=SUMMARY, duration_ms=2100.0)
    cid = seed_conversation(
        stack.database_url,
        username,
        "Trip planning",
        [
            *early_turns(4),
            user("And the tea ceremony?"),
            compacted_reply("Book the tea ceremony for day 3.", done),
        ],
    )
    page.goto(f"{stack.base_url}/c/{cid}")
    boundary = page.locator(".boundary")
    expect(boundary).to_have_count(1)
    expect(boundary).to_contain_text("Earlier messages summarized")
    expect(boundary).to_contain_text("3,600 → 1,500 tokens")
    # It sits above the question of the turn that compacted; everything before stays shown.
    expect(page.locator(".boundary + .msg.user .msg-body")).to_have_text("And the tea ceremony?")
    expect(page.locator(".msg.user .msg-body").first).to_have_text("Question 0 about Kyoto")
    expect(page.locator(".msg")).to_have_count(10)
    expect(boundary.locator(".summary-text")).to_be_hidden()
    boundary.locator("summary").click()
    expect(boundary.locator(".summary-text")).to_have_text(SUMMARY)
    meter = page.locator("#context-meter")
    expect(meter).to_have_attribute("data-state", "compacted")
    page.locator("#context-meter .meter-button").focus()
    expect(page.locator("#meter-details")).to_contain_text("Earlier messages were summarized")
    expect(page.locator('#meter-details tr[data-source="summary"] td.num')).to_have_text("600")
    screenshot(page, "compaction-boundary")

    # The seeded conversation never ran a turn: the model view says nothing was sent yet
    # (the request as sent is tested in test_model_view).
    page.get_by_role("button", name="What the model sees").click()
    dialog = page.get_by_role("dialog", name="What the model sees")
    expect(dialog).to_be_visible()
    expect(dialog.locator(".model-view-note")).to_have_text(
        "Nothing has been sent to the model in this conversation yet."
    )
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


def _running_turn(
    page: Page, stack: Stack, username: str, earlier: int, question: str, events: list[tuple[str, dict]]
) -> tuple[int, int, int]:
    """A conversation of `earlier` turns whose next turn is running and has logged `events`
    after its start; (conversation, turn, reply message) ids."""
    start(page, stack, username)
    cid = seed_conversation(stack.database_url, username, question, early_turns(earlier))
    turn_id, reply_id = seed_running_turn(stack.database_url, cid, question)
    started = {"turn_id": turn_id, "message_id": reply_id, "model": "m", "profile": "m"}
    append_turn_events(stack.database_url, turn_id, [("turn.started", started), *events])
    return cid, turn_id, reply_id


def _complete(
    stack: Stack,
    ids: tuple[int, int, int],
    answer: str,
    compactions: list[dict[str, Any]],
    events: list[tuple[str, dict]],
    **result: Any,
) -> None:
    """Ends the running turn of `_running_turn` (its ids): `events`, then `answer`, stored with
    the turn's compaction records."""
    stored_result = {
        "value": answer,
        "blocks": [{"type": "text", "text": answer}],
        "context_compactions": compactions,
        **result,
    }
    complete_turn(stack.database_url, ids, answer, stored_result, events)


def test_compacting_survives_a_reload_mid_compaction_then_the_boundary_appears(
    page: Page, stack: Stack, username: str
) -> None:
    cid, turn_id, reply_id = _running_turn(
        page,
        stack,
        username,
        3,
        "Now plan day 4",
        [
            ("context.metrics", metrics(3600, "warning", phase="pre_turn")),
            ("context.compaction", compaction_record("started")),
            ("context.compaction", compaction_record("in_progress")),
        ],
    )
    page.goto(f"{stack.base_url}/c/{cid}")
    meter = page.locator("#context-meter")
    expect(meter).to_have_attribute("data-state", "compacting")
    expect(meter.locator(".meter-compacting")).to_have_text("Compacting context…")
    expect(last_assistant(page)).to_have_attribute("data-status", "running")
    screenshot(page, "compacting")
    # A reload while the summarizer still works: the replayed heartbeat restores the indicator.
    append_turn_events(
        stack.database_url, turn_id, [("context.compaction", compaction_record("in_progress"))]
    )
    page.reload()
    expect(meter).to_have_attribute("data-state", "compacting")
    expect(meter.locator(".meter-compacting")).to_be_visible()

    done = compaction_record("completed", after_tokens=1400, summary_text=SUMMARY)
    _complete(
        stack,
        (cid, turn_id, reply_id),
        "Day 4: Fushimi Inari at dawn.",
        [done],
        [("context.compaction", done), ("context.metrics", metrics(1500, "compacted", phase="mid_turn"))],
        context_metrics=metrics(1600, "compacted", latest_compaction=done),
    )
    wait_finished(page)
    expect(meter).to_have_attribute("data-state", "compacted")
    expect(meter.locator(".meter-compacting")).to_be_hidden()
    expect(page.locator(".boundary")).to_have_count(1)
    expect(page.locator(".boundary + .msg.user .msg-body")).to_have_text("Now plan day 4")
    expect(last_assistant(page)).to_contain_text("Fushimi Inari")
    # The same boundary comes back from the stored record after a reload.
    page.reload()
    expect(page.locator(".boundary")).to_have_count(1)
    expect(meter).to_have_attribute("data-state", "compacted")


def test_a_failed_compaction_clears_the_indicator(page: Page, stack: Stack, username: str) -> None:
    cid, turn_id, _ = _running_turn(
        page, stack, username, 1, "Continue", [("context.compaction", compaction_record("started"))]
    )
    page.goto(f"{stack.base_url}/c/{cid}")
    meter = page.locator("#context-meter")
    expect(meter).to_have_attribute("data-state", "compacting")
    append_turn_events(
        stack.database_url,
        turn_id,
        [("context.compaction", compaction_record("fallback", failure_reason="summarizer_timeout"))],
    )
    expect(meter.locator(".meter-compacting")).to_be_hidden()
    expect(page.locator(".boundary")).to_have_count(0)
    # The turn then fails: the reply says so and nothing stays "compacting".
    error = {"code": "provider_error", "message": "the model is unavailable"}
    append_turn_events(
        stack.database_url,
        turn_id,
        [("turn.failed", {**error, "partial": ""})],
        final={"status": "failed", "result": {"value": "", "blocks": [], "error": error}},
    )
    wait_finished(page, "failed")
    expect(last_assistant(page).locator(".msg-note")).to_contain_text("the model is unavailable")
    expect(meter).not_to_have_attribute("data-state", "compacting")


def test_a_live_compaction_shows_the_heartbeat_then_the_boundary(
    page: Page, stack: Stack, username: str
) -> None:
    """A real summary compaction inside a turn: the conversation stays under the pre-trigger of
    compaction ahead of time, then one long message takes it past the trigger, so the turn
    compacts inline; the summarizer (slowed) runs while heartbeats arrive, then the boundary
    appears at the turn that compacted."""
    start(page, stack, username)
    for n in range(3):
        send(page, f"Fact {n}: " + "budget 1200 EUR, April, Kyoto temples. " * 40)
        wait_finished(page)
    assert meter_used(page) < ahead_trigger(page), "the history alone already reaches the pre-trigger"
    # The summarizer is slow (heartbeats arrive meanwhile); the answer comes after it.
    stack.provider.script_summaries(
        text("Summary of earlier turns: budget 1200 EUR, April, Kyoto.", first_token_delay=8.0)
    )
    stack.provider.script(text("Here is day 4."))
    send(page, "Plan day 4 " + "with details " * 1_100)
    meter = page.locator("#context-meter")
    expect(meter).to_have_attribute("data-state", "compacting", timeout=20_000)
    expect(meter.locator(".meter-compacting")).to_be_visible()
    wait_finished(page, timeout=40_000)
    expect(meter.locator(".meter-compacting")).to_be_hidden()
    expect(page.locator(".boundary")).to_have_count(1)
    page.locator(".boundary summary").click()
    expect(page.locator(".boundary .summary-text")).to_contain_text("1200 EUR")


def test_the_boundary_sits_where_the_stored_record_says_the_kept_tail_starts(
    page: Page, stack: Stack, username: str
) -> None:
    """Whether the summary was made inside a turn or ahead of time after one, the line sits
    where the stored record says."""
    client = start(page, stack, username)

    # Each message about a quarter of the 8k window's input: the history soon reaches the
    # pre-trigger, and the compaction ahead of time (or, if a send overtakes it, the turn's own)
    # stores a checkpoint on one of the replies.
    def completed_records() -> list[dict[str, Any]]:
        replies = [m for m in stored(client, conversation_id(page)) if m["role"] == "assistant"]
        return [
            r
            for reply in replies
            for r in reply["result"].get("context_compactions", [])
            if r["strategy"] in ("summary_compact", "summary_ahead") and r["status"] == "completed"
        ]

    records: list[dict[str, Any]] = []
    for turn in range(8):
        send(page, f"Turn {turn}: " + "apple " * 1_100)
        wait_finished(page)
        records = completed_records()
        if records:
            break
    assert records, "no summary compaction happened"
    # A compaction ahead of time can still be running when the replies are read, and the next
    # turn (waiting for it, then perhaps compacting again) stores a second record: each
    # completed record gets its own line, and the newest decides what is summarized. The
    # records are read again after the reload until a background job has not added one meanwhile.
    boundary = page.locator(".boundary")
    for _ in range(5):
        page.reload()
        expect(page.locator(".msg.assistant").last).to_have_attribute("data-status", "completed")
        settled = completed_records()
        if settled == records:
            break
        records = settled
    kept = [record["first_kept_message_id"] for record in records]
    assert None not in kept
    expect(boundary).to_have_count(len(records))
    # Each line sits right above the first message its record kept verbatim.
    below = page.locator(".boundary + .msg").evaluate_all("els => els.map(e => Number(e.dataset.messageId))")
    assert below == sorted(kept), (below, kept)
    shown = [
        int(i or 0) for i in page.locator(".msg").evaluate_all("els => els.map(e => e.dataset.messageId)")
    ]
    summarized = [
        int(i or 0)
        for i in page.locator(".msg.is-summarized").evaluate_all("els => els.map(e => e.dataset.messageId)")
    ]
    newest = records[-1]
    assert summarized == [i for i in shown if i < max(kept)] and summarized, (shown, summarized, kept)
    line = boundary.nth(sorted(kept).index(newest["first_kept_message_id"]))
    line.locator("summary").click()
    expect(line.locator(".summary-text")).to_have_text(newest["summary_text"])
    screenshot(page, "compaction-boundary-live")


def _drawn(page: Page) -> tuple[list[tuple[int, int]], list[int]]:
    """Where the page draws its boundaries (their place among the transcript's children, and
    the message right below each), and the messages marked as summarized."""
    return page.locator("#messages").evaluate(
        """list => [
            [...list.querySelectorAll(':scope > .boundary')].map(b =>
                [[...list.children].indexOf(b), Number(b.nextElementSibling.dataset.messageId)]),
            [...list.querySelectorAll('.msg.is-summarized')].map(m => Number(m.dataset.messageId)),
        ]"""
    )


def test_a_turn_after_a_compaction_ahead_of_time_draws_its_boundary_live(
    page: Page, stack: Stack, username: str
) -> None:
    """The summary made between two turns is drawn by the next turn, as its meter falls to the
    checkpoint, where a reload draws it: above the first message kept verbatim, the messages
    above it marked "summarized for the model"."""
    client = start(page, stack, username)
    for turn in range(2):
        send(page, f"Turn {turn}: " + "apple " * 900)
        wait_finished(page)
    cid = conversation_id(page)
    crossing = [m for m in stored(client, cid) if m["role"] == "assistant"][-1]

    def made_ahead() -> list[dict[str, Any]]:
        reply = next(m for m in stored(client, cid) if m["message_id"] == crossing["message_id"])
        return [r for r in reply["result"].get("context_compactions", []) if r["status"] == "completed"]

    # The job after the second turn has stored its summary before the next send (so that turn
    # does not wait for it); the next turn is short, so no job is due after it and a reload
    # draws the same records as the live page.
    for _ in range(150):
        if made_ahead():
            break
        page.wait_for_timeout(100)
    [record] = made_ahead()
    assert record["strategy"] == "summary_ahead" and record["first_kept_message_id"], record
    expect(page.locator(".boundary")).to_have_count(0)
    before = meter_used(page)
    stack.provider.script(text("Noted.", first_token_delay=4.0))
    send(page, "Turn 2: and now?")
    # Drawn while the reply is still being written, as the meter falls to the checkpoint.
    expect(page.locator(".boundary")).to_have_count(1)
    expect(last_assistant(page)).to_have_attribute("data-status", "running")
    fallen = "before => Number(document.querySelector('#context-meter [role=meter]').ariaValueNow) < before"
    page.wait_for_function(fallen, arg=before)
    live = _drawn(page)
    boundaries, summarized = live
    assert [below for _, below in boundaries] == [record["first_kept_message_id"]], live
    assert summarized == list(range(1, record["first_kept_message_id"])), live
    # A reload while it runs draws the stored record and replays the turn's stream: one line.
    page.reload()
    expect(last_assistant(page)).to_have_attribute("data-status", "running")
    page.wait_for_function(fallen, arg=before)
    expect(page.locator(".boundary")).to_have_count(1)
    assert _drawn(page) == live
    wait_finished(page)
    assert _drawn(page) == live
    page.reload()
    expect(last_assistant(page)).to_have_attribute("data-status", "completed")
    expect(page.locator(".boundary")).to_have_count(1)
    assert _drawn(page) == live


@pytest.mark.parametrize("first_kept", [31, 11], ids=["kept-on-the-newest-page", "kept-on-an-older-page"])
def test_a_live_boundary_over_messages_on_an_older_page(
    page: Page, stack: Stack, username: str, first_kept: int
) -> None:
    """A conversation longer than the first page (older messages load as you scroll up) whose
    running turn summarizes up to `first_kept`: the live line sits above everything shown while
    its kept message is not loaded yet; scrolling up puts it above that message and marks the
    older messages "summarized for the model", and a reload then scrolling up draws the same."""
    cid, turn_id, reply_id = _running_turn(page, stack, username, 30, "And the last day?", [])
    page.goto(f"{stack.base_url}/c/{cid}")
    messages = page.locator(".msg")
    expect(messages).to_have_count(40)
    oldest = int(messages.first.get_attribute("data-message-id") or 0)
    assert oldest > 1

    def scrolled_to_the_top() -> tuple[list[tuple[int, int]], list[int]]:
        for _ in range(30):
            page.locator("#transcript").evaluate("el => { el.scrollTop = 0; }")
            if messages.count() == reply_id:
                break
            page.wait_for_timeout(150)
        expect(messages).to_have_count(reply_id)
        return _drawn(page)

    done = compaction_record(
        "completed", after_tokens=1500, summary_text=SUMMARY, first_kept_message_id=first_kept
    )
    append_turn_events(stack.database_url, turn_id, [("context.compaction", done)])
    expect(page.locator(".boundary")).to_have_count(1)
    boundaries, summarized = _drawn(page)
    assert [below for _, below in boundaries] == [max(first_kept, oldest)], boundaries
    assert summarized == list(range(oldest, first_kept)), summarized
    live = scrolled_to_the_top()
    assert [below for _, below in live[0]] == [first_kept], live
    assert live[1] == list(range(1, first_kept)), live

    _complete(stack, (cid, turn_id, reply_id), "Spend it in Arashiyama.", [done], [])
    wait_finished(page)
    assert _drawn(page) == live
    page.reload()
    expect(last_assistant(page)).to_have_attribute("data-status", "completed")
    expect(page.locator(".boundary")).to_have_count(1)
    assert scrolled_to_the_top() == live
