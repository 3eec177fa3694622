"""Text is delivered in frames (one `message.delta` per ~20 ms of output per turn), and the
frames replay the text exactly: what the runtime streamed, what the log stores and what a
replay synthesized after pruning all fold (`chat_shell.events.fold`) into the same text and
blocks."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.db import create_engine, session_factory, transaction
from backend.models import Turn
from backend.models.base import utcnow
from backend.services.dashboard import rollups
from backend.services.delivery import event_log, streams
from backend.services.delivery.broker import LocalBroker
from backend.services.delivery.event_log import FRAME_SECONDS, EventWriter, StoredEvent, read_events
from backend.services.delivery.relay import Relay
from backend.services.delivery.stream_events import visible
from chat_shell.contracts import (
    MessageDelta,
    ToolCompleted,
    ToolStarted,
    TurnCompleted,
    TurnEvent,
    TurnResult,
    TurnStarted,
)
from chat_shell.events.fold import VISIBLE_EVENT_TYPES, VisibleTurn, fold
from tests.support.turns import stored_turn

# A piece of text and the pause after it (none, shorter than a frame, longer than a frame).
PIECES = st.lists(
    st.tuples(st.text(max_size=6), st.sampled_from([0.0, 0.0, 0.002, FRAME_SECONDS * 1.5])),
    min_size=1,
    max_size=40,
)


def _folded(events: Sequence[StoredEvent]) -> VisibleTurn:
    seen = fold(visible(e.event, e.data) for e in events if e.event in VISIBLE_EVENT_TYPES)
    seen.end()
    return seen


async def _relayed(url: str, pieces: Sequence[tuple[str, float]], tool_at: int) -> tuple[VisibleTurn, int]:
    """Streams the pieces through a real relay and log (a tool round at `tool_at`); checks the
    log, then the replay of its pruned log, against the fold of what was streamed."""
    engine = create_engine(url)
    sessions = session_factory(engine)
    started = await stored_turn(sessions)
    writer = EventWriter(sessions, LocalBroker().publish, rollups.write_staged)
    writer.start()
    streamed: list[TurnEvent] = []
    try:
        turn_log = writer.open(started.turn_id)
        relay = Relay(started, turn_log, "m")
        relay.forward(TurnStarted(model="m", profile="m"))
        for index, (piece, pause) in enumerate(pieces):
            if index == tool_at:
                streamed += [
                    ToolStarted(call_id="c1", name="read_attachment", args={"attachment_id": 1}),
                    ToolCompleted(call_id="c1", name="read_attachment", output="notes"),
                ]
                relay.forward(streamed[-2])
                relay.forward(streamed[-1])
            streamed.append(MessageDelta(text=piece))
            relay.forward(streamed[-1])
            if pause:
                await asyncio.sleep(pause)
        expected = fold(streamed)
        expected.end()
        result = TurnResult(
            value=expected.text, blocks=expected.blocks, termination_reason="normal_completion"
        )
        relay.forward(TurnCompleted(result=result))
        await turn_log.drain()
    finally:
        await writer.stop()
    try:
        async with sessions() as db:
            logged = await read_events(db, started.turn_id, 0)
        assert [e.seq for e in logged] == list(range(1, len(logged) + 1))
        stored = _folded(logged)
        assert stored.text == expected.text
        assert stored.blocks == expected.blocks
        async with transaction(sessions) as db:
            assert await streams.prune_finished(db, utcnow() + timedelta(seconds=1)) >= 1
        async with sessions() as db:
            turn = await db.get_one(Turn, started.turn_id)
            replayed = _folded(await streams.synthesize(db, turn, 0))
        assert replayed.text == expected.text
        assert replayed.blocks == expected.blocks
        return stored, sum(e.event == "message.delta" for e in logged)
    finally:
        await engine.dispose()


@given(pieces=PIECES, tool_at=st.integers(min_value=0, max_value=45))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_frames_replay_the_streamed_text_exactly(
    sqlite_url: str, pieces: list[tuple[str, float]], tool_at: int
) -> None:
    asyncio.run(_relayed(sqlite_url, pieces, tool_at))


async def test_a_burst_of_tokens_becomes_a_few_frames(sqlite_url: str) -> None:
    pieces = [(f"tok{n} ", 0.0) for n in range(300)]
    stored, deltas = await _relayed(sqlite_url, pieces, tool_at=len(pieces))
    assert stored.text == "".join(piece for piece, _ in pieces)
    assert deltas <= 3  # the first token at once, the rest in the next frame(s)


async def test_tokens_slower_than_a_frame_go_out_one_by_one(sqlite_url: str) -> None:
    """A provider slower than one token per frame gets nothing held back: each token is sent
    the moment it arrives."""
    tokens = 20
    pieces = [(f"tok{n} ", FRAME_SECONDS * 1.5) for n in range(tokens)]
    _, deltas = await _relayed(sqlite_url, pieces, tool_at=tokens)
    assert deltas == tokens


async def test_tokens_at_the_frame_rate_with_jitter_are_not_held_back(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens about one frame apart on average but unevenly (network and scheduling jitter):
    one that comes early is sent the moment it arrives, from the frame bucket's reserve,
    instead of waiting out the rest of a frame. Frames are made long here, so a wait shows."""
    frame = 0.3
    monkeypatch.setattr(event_log, "FRAME_SECONDS", frame)
    engine = create_engine(sqlite_url)
    sessions = session_factory(engine)
    started = await stored_turn(sessions)
    loop = asyncio.get_running_loop()
    published: dict[str, float] = {}

    async def publish(events: Sequence[StoredEvent]) -> None:
        published.update((e.data["text"], loop.time()) for e in events if e.event == "message.delta")

    writer = EventWriter(sessions, publish, rollups.write_staged)
    writer.start()
    sent: dict[str, float] = {}
    try:
        turn_log = writer.open(started.turn_id)
        for n in range(10):
            await asyncio.sleep(frame * (1.45 if n % 2 else 0.6))  # 1.025 frames apart on average
            sent[f"tok{n} "] = loop.time()
            turn_log.append_text(f"tok{n} ")
        await turn_log.drain()
    finally:
        await writer.stop()
        await engine.dispose()
    assert published.keys() == sent.keys()  # each token its own frame
    held = {token: published[token] - sent[token] for token in sent}
    assert max(held.values()) < frame / 3, held
