"""The one fold of a turn's events (what the user saw) and its inverse, over generated turns."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from chat_shell.contracts import (
    ApprovalDecided,
    ApprovalRequested,
    CompactionRecord,
    ContextCompactionEvent,
    MessageDelta,
    TextBlock,
    ToolBlock,
    ToolCompleted,
    ToolStarted,
    TurnCancelled,
    TurnCompleted,
    TurnEvent,
    TurnFailed,
    TurnResult,
    TurnStarted,
)
from chat_shell.events.fold import PARAGRAPH_BREAK, VisibleTurn, fold, replay
from tests.conftest import DEEP

EXAMPLES = 400 if DEEP else 80
texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=0, max_size=12)
# A round of the turn: some text, a tool call (answered or not; "ask first" or not: waiting, or
# allowed / denied), or an event that shows nothing.
approvals = st.sampled_from([None, "pending", True, False])
rounds = st.one_of(
    st.tuples(st.just("text"), st.lists(texts, min_size=1, max_size=4)),
    st.tuples(st.just("tool"), st.tuples(st.booleans(), st.booleans(), texts, approvals)),
    st.tuples(st.just("compaction"), st.none()),
)
endings = st.sampled_from(["completed", "failed", "cancelled", "interrupted"])


def _terminal(ending: str, partial: str) -> TurnEvent:
    if ending == "completed":
        return TurnCompleted(result=TurnResult(value=partial, termination_reason="normal_completion"))
    if ending == "cancelled":
        return TurnCancelled(partial=partial, result=TurnResult(termination_reason="cancelled"))
    # A failure, or what orphan recovery appends for a turn left running by a crash.
    return TurnFailed(
        code=ending, message=ending, partial=partial, result=TurnResult(termination_reason="internal_error")
    )


def _produce(plan: list[tuple[str, object]], ending: str) -> list[TurnEvent]:
    """Events as the runtime emits them: text deltas open each round with `opening`."""
    seen = VisibleTurn()
    events: list[TurnEvent] = [TurnStarted(model="m", profile="m")]

    def emit(event: TurnEvent) -> None:
        seen.add(event)
        events.append(event)

    for number, (kind, detail) in enumerate(plan):
        if kind == "text":
            for piece in detail:  # type: ignore[union-attr]
                emit(MessageDelta(text=seen.opening(piece)))
        elif kind == "tool":
            answered, failed, output, approval = detail  # type: ignore[misc]
            emit(ToolStarted(call_id=f"call-{number}", name="lookup", args={"q": number}))
            if approval is not None:
                emit(ApprovalRequested(call_id=f"call-{number}", name="lookup", args={"q": number}))
            if isinstance(approval, bool):
                emit(ApprovalDecided(call_id=f"call-{number}", allowed=approval))
            if answered:
                emit(ToolCompleted(call_id=f"call-{number}", name="lookup", output=output, is_error=failed))
        else:
            emit(
                ContextCompactionEvent(
                    record=CompactionRecord(status="started", created_at=datetime.now(UTC))
                )
            )
    emit(_terminal(ending, seen.text))
    return events


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(rounds, max_size=10), endings)
def test_the_text_is_every_delta_in_order_and_the_replay_folds_back(plan, ending) -> None:
    events = _produce(plan, ending)
    seen = fold(events)
    assert seen.text == "".join(e.text for e in events if isinstance(e, MessageDelta))

    replayed = fold([*replay(seen.blocks), events[-1]])
    assert replayed.blocks == seen.blocks
    assert replayed.text == seen.text


def test_rounds_of_text_are_paragraphs_and_an_unanswered_tool_ends_as_an_error() -> None:
    events = _produce(
        [("text", ["Let me ", "check."]), ("tool", (False, False, "", None)), ("text", ["Found it."])],
        "cancelled",
    )
    seen = fold(events)
    assert seen.text == "Let me check." + PARAGRAPH_BREAK + "Found it."
    assert seen.blocks == [
        TextBlock(text="Let me check."),
        ToolBlock(call_id="call-1", name="lookup", args={"q": 1}, status="error"),
        TextBlock(text=PARAGRAPH_BREAK + "Found it."),
    ]


def test_an_ask_first_call_is_pending_until_decided() -> None:
    seen = fold(
        _produce([("tool", (False, False, "", "pending")), ("tool", (True, True, "no", False))], "failed")
    )
    assert [(b.approval, b.status) for b in seen.blocks if isinstance(b, ToolBlock)] == [
        ("pending", "error"),
        ("denied", "error"),
    ]


def test_a_turn_that_opens_with_a_tool_has_no_leading_break() -> None:
    seen = fold(_produce([("tool", (True, False, "42", None)), ("text", ["It is 42."])], "completed"))
    assert seen.text == "It is 42."
    assert seen.blocks[0] == ToolBlock(
        call_id="call-0", name="lookup", args={"q": 0}, output="42", status="completed"
    )


def test_text_after_the_blocks_were_read_extends_the_open_block() -> None:
    seen = VisibleTurn()
    seen.add(MessageDelta(text="a"))
    assert seen.text == "a"
    seen.add(MessageDelta(text="b"))
    assert seen.blocks == [TextBlock(text="ab")]
