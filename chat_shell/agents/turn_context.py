"""What a turn knows about itself across attempts: which input messages it started with."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from langchain_core.messages import BaseMessage, MessageLikeRepresentation
from langgraph.graph.message import add_messages


@dataclass(frozen=True)
class TurnContext:
    turn_id: int
    # Ids of the messages the turn started with. A message whose id is not here was produced by
    # this turn (model replies, tool results, summaries, retained clones), wherever compaction
    # moved it; positions are never trusted.
    original_input_ids: frozenset[str]

    @classmethod
    def start(cls, turn_id: int, messages: Sequence[BaseMessage]) -> tuple[TurnContext, list[BaseMessage]]:
        """The context and the input with an id on every message (the reducer assigns missing ids)."""
        given: list[MessageLikeRepresentation] = list(messages)
        # The reducer gives back BaseMessages for BaseMessages; it is typed for any message-like.
        with_ids = cast("list[BaseMessage]", add_messages([], given))
        return cls(turn_id, frozenset(m.id for m in with_ids if m.id)), with_ids

    def thread_id(self, attempt: int) -> str:
        """A fresh LangGraph thread per attempt: retries never see another attempt's checkpoint."""
        return f"turn-{self.turn_id}-attempt-{attempt}-{uuid.uuid4().hex[:12]}"

    def produced(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The messages of `messages` this turn produced."""
        return [m for m in messages if not m.id or m.id not in self.original_input_ids]
