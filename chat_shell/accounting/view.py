"""The guard's running account of one turn's messages: what is in graph state, what the model
sees, and what each message costs, kept incrementally.

LangGraph hands the hook the same message objects on every call of a turn (the reducer copies
the list, not the messages), with new messages appended and our own upserts in place. So a
call first checks, in one C-level list comparison, that the state still starts with what it
held after the previous call; then only the new messages are counted and classified, and the
per-source totals are updated, not recomputed. Anything else (a rewritten state, a reloaded
copy) rebuilds from the per-message count cache, which costs a hash per message and no
tokenization. Messages are treated as immutable, as LangChain and LangGraph treat them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage

from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.messages.markers import is_summary

Attribution = Callable[[BaseMessage, int], Mapping[str, int]]


def default_bucket(message: BaseMessage) -> str:
    """The breakdown source a message belongs to, by type and marker (never by text)."""
    if is_summary(message):
        return "summary"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, ToolMessage):
        return "tool_outputs"
    return "history"


class ContextView:
    def __init__(self, counter: TokenCounter, attribution: Attribution) -> None:
        self._counter = counter
        self._attribution = attribution
        self.epoch = 0
        self._reset()

    def _reset(self) -> None:
        # A rebuild starts a new epoch: nothing recorded against the old entries still holds.
        self.epoch += 1
        # Indices shown differently since the epoch began, in order (see `unchanged_prefix`).
        self.rewritten: list[int] = []
        # Parallel lists, one entry per message, in order.
        self.state: list[BaseMessage] = []  # graph state as it is once our upserts are applied
        self.shown: list[BaseMessage] = []  # what the model sees
        self.tokens: list[int] = []  # count of the shown message
        self.hashes: list[str] = []  # hash of the state message
        self.marked: list[bool] = []  # the state message carries a valid `token_count` marker
        self._own: list[int] = []  # tokens left with the message's own bucket after claims
        self._claims: list[Mapping[str, int]] = []
        self._buckets: list[str] = []
        self.totals: dict[str, int] = {}
        self.message_tokens = 0
        self.latest_human: int | None = None
        # Entries before this index have been through the source stages.
        self.settled = 0

    def __len__(self) -> int:
        return len(self.state)

    def sync(self, messages: Sequence[BaseMessage]) -> int:
        """Bring the view up to `messages`; returns the index of the first new entry."""
        if not isinstance(messages, list):
            messages = list(messages)
        held = len(self.state)
        # Identity (or, for copies, field equality) of the whole held prefix, compared in C.
        if not (held and len(messages) >= held and messages[:held] == self.state):
            self._reset()
            held = 0
        for message in messages[held:]:
            self._append(message)
        return held

    def _append(self, message: BaseMessage) -> None:
        count = self._counter.count_message(message)
        self.state.append(message)
        self.shown.append(message)
        self.tokens.append(count.tokens)
        self.hashes.append(count.content_hash)
        self.marked.append(count.persisted)
        self._claims.append({})
        self._own.append(0)
        self._buckets.append(default_bucket(message))
        self._account(len(self.state) - 1, +1)
        if isinstance(message, HumanMessage) and not is_summary(message):
            self.latest_human = len(self.state) - 1

    def replace(self, index: int, shown: BaseMessage, *, in_state: bool) -> None:
        """Show `shown` instead of the current entry; `in_state` when it is upserted too."""
        count = self._counter.count_message(shown)
        self._account(index, -1)
        self.shown[index] = shown
        self.tokens[index] = count.tokens
        self.rewritten.append(index)
        if in_state:
            self.state[index] = shown
            self.hashes[index] = count.content_hash
            self.marked[index] = count.persisted
        self._account(index, +1)

    def mark(self) -> tuple[int, int]:
        """A point in this view's history, for `unchanged_prefix`."""
        return self.epoch, len(self.rewritten)

    def unchanged_prefix(self, mark: tuple[int, int], length: int) -> bool:
        """Whether the first `length` shown messages are exactly (same ids, same content) those
        shown at `mark`: the state held its prefix (checked on every sync, else a new epoch)
        and nothing below `length` was shown differently since."""
        epoch, rewrites = mark
        return (
            epoch == self.epoch
            and len(self.state) >= length
            and all(index >= length for index in self.rewritten[rewrites:])
        )

    def adopt(self, index: int, message: BaseMessage) -> None:
        """Hold `message` in state at `index`: the same message with other markers (it counts
        the same), so a caller passing the annotated list back costs no rebuild."""
        if self.shown[index] is self.state[index]:
            self.shown[index] = message
        self.state[index] = message
        self.marked[index] = True

    def _account(self, index: int, sign: int) -> None:
        tokens = self.tokens[index]
        if sign > 0:
            claims = {
                bucket: min(n, tokens) for bucket, n in self._attribution(self.shown[index], tokens).items()
            }
            self._claims[index] = claims
            self._own[index] = max(0, tokens - sum(claims.values()))
        self.message_tokens += sign * tokens
        bucket = self._buckets[index]
        self.totals[bucket] = self.totals.get(bucket, 0) + sign * self._own[index]
        for claim, n in self._claims[index].items():
            self.totals[claim] = self.totals.get(claim, 0) + sign * n

    def local_parts(self) -> dict[str, int]:
        """Local message tokens per breakdown source; the latest user message is the current
        input, earlier ones are history."""
        parts = dict(self.totals)
        if self.latest_human is not None:
            own = self._own[self.latest_human]
            bucket = self._buckets[self.latest_human]
            parts[bucket] = parts.get(bucket, 0) - own
            parts["current_input"] = parts.get("current_input", 0) + own
        return parts
