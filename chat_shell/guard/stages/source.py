"""Source stages (SPEC 5.2.1-2): each owns a kind of message (tool outputs, attachment
previews, ...) and decides how it is shown to the model under a normal and an emergency policy.

`GuardSource` is what a source implements; `SourceStages` runs the guard's sources in order:
their I/O before a hook call (`prepare`), the normal policy on the new messages (`apply`), the
stricter one on a message the emergency trim picks (`render_emergency`), their claims on the
breakdown (`attribute`), and the `context_protection.<source>` trace events of what they cut.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Protocol

from langchain_core.messages import BaseMessage

from chat_shell.accounting.budget import Budget
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.accounting.view import ContextView
from chat_shell.telemetry import record_protection

logger = logging.getLogger(__name__)

EMERGENCY_RATIO = 0.3


@dataclass(frozen=True)
class SourceContext:
    counter: TokenCounter
    budget: Budget
    # Offered tools that page through their output: tool name -> its paging argument.
    paging: Mapping[str, str] = field(default_factory=dict)


class GuardSource(Protocol):
    """A source stage. On each hook call the guard first lets the source `prepare` the new
    messages, then calls `render` once for every new message the source `applies_to` (normal
    policy), and again, largest messages first, in the emergency stage."""

    # Read-only members, so a frozen dataclass or a class attribute provides them.
    @property
    def name(self) -> str:
        """The trace operation: `context_protection.<name>` (SPEC 5.8)."""
        ...

    @property
    def adds_content(self) -> bool:
        """True when the normal render adds content the message does not hold (attachment
        previews) rather than cutting it: such a source records its own trace event, when it cut
        something, since the message's token growth says nothing about that. Emergency renders
        only cut, and the guard traces them for every source."""
        ...

    def applies_to(self, message: BaseMessage) -> bool: ...

    async def prepare(self, messages: Sequence[BaseMessage], ctx: SourceContext) -> None:
        """Fetch what rendering `messages` (the new ones, as shown) needs, e.g. attachment text,
        so that `render` stays synchronous and free of I/O."""
        ...

    def render(
        self, message: BaseMessage, tokens: int, ctx: SourceContext, *, emergency: bool
    ) -> BaseMessage | None:
        """The message as the model must see it, with the same id and type, or None when it
        already fits the policy (normal, or emergency = normal × `EMERGENCY_RATIO`). `tokens`
        is the cached count of the whole message (an upper bound of its content), so a message
        that obviously fits costs nothing.

        Must be idempotent: rendering its own output under the same policy returns None, and
        a stricter policy shortens the rendered form without nesting it. The input message is
        never mutated.
        """
        ...

    def attribute(self, message: BaseMessage, tokens: int, ctx: SourceContext) -> Mapping[str, int]:
        """Breakdown claims (SPEC 5.7): how many of the message's `tokens` belong to which
        source bucket (e.g. `{"attachments": 1200}` for previews inside a user message). The
        rest stays with the message's own bucket."""
        ...


@dataclass
class _Cut:
    """What one source cut in one stage of one hook call, for the trace event."""

    messages: int = 0
    before: int = 0
    after: int = 0
    seconds: float = 0.0


@dataclass
class Cuts:
    """The cuts of one stage of one hook call, by source."""

    by_source: dict[str, _Cut] = field(default_factory=dict)

    def add(self, source: str, before: int, after: int, started: float) -> None:
        cut = self.by_source.setdefault(source, _Cut())
        cut.messages += 1
        cut.before += before
        cut.after += after
        cut.seconds += perf_counter() - started

    @property
    def messages(self) -> int:
        return sum(cut.messages for cut in self.by_source.values())

    def trace(self, *, emergency: bool, skip: frozenset[str] = frozenset()) -> None:
        for name, cut in self.by_source.items():
            if name in skip:
                continue
            record_protection(
                name,
                "applied",
                duration_ms=round(cut.seconds * 1000, 3),
                before_tokens=cut.before,
                after_tokens=cut.after,
                messages_truncated=cut.messages,
                emergency=emergency,
            )


def show(view: ContextView, index: int, shown: BaseMessage, upserts: dict[str, BaseMessage]) -> None:
    """Show `shown` at `index`; upsert it into state unless the message has no id (an upsert
    without id would append a duplicate), in which case only the view changes."""
    in_state = shown.id is not None
    view.replace(index, shown, in_state=in_state)
    if in_state:
        upserts[str(shown.id)] = shown


class SourceStages:
    """The guard's source stages, in order."""

    def __init__(self, sources: Sequence[GuardSource], ctx: SourceContext) -> None:
        self._sources = tuple(sources)
        self.ctx = ctx
        # Sources that add content record their own trace events (see `GuardSource`).
        self._self_traced = frozenset(s.name for s in self._sources if s.adds_content)

    def attribute(self, message: BaseMessage, tokens: int) -> dict[str, int]:
        """The breakdown claims of every source on `message` (the view's attribution)."""
        claims: dict[str, int] = {}
        for source in self._sources:
            if source.applies_to(message):
                for bucket, n in source.attribute(message, tokens, self.ctx).items():
                    claims[bucket] = claims.get(bucket, 0) + n
        return claims

    def owner(self, message: BaseMessage) -> GuardSource | None:
        return next((s for s in self._sources if s.applies_to(message)), None)

    async def prepare(self, view: ContextView) -> None:
        """Let the sources fetch what the new messages need (I/O) before `apply`."""
        new = view.shown[view.settled :]
        if new:
            for source in self._sources:
                await source.prepare(new, self.ctx)

    def apply(self, view: ContextView, upserts: dict[str, BaseMessage]) -> bool:
        """The normal policy of every source on the messages not seen before; whether any
        message is now shown differently."""
        cuts = Cuts()
        for index in range(view.settled, len(view)):
            for source in self._sources:
                shown = view.shown[index]
                if not source.applies_to(shown):
                    continue
                started = perf_counter()
                rendered = source.render(shown, view.tokens[index], self.ctx, emergency=False)
                if rendered is None:
                    continue
                before = view.tokens[index]
                show(view, index, rendered, upserts)
                cuts.add(source.name, before, view.tokens[index], started)
                logger.info(
                    "[UnifiedContextGuard] %s compacted message_id=%s tokens %d->%d",
                    source.name,
                    rendered.id,
                    before,
                    view.tokens[index],
                )
        view.settled = len(view)
        cuts.trace(emergency=False, skip=self._self_traced)
        return bool(cuts.by_source)

    def render_emergency(self, message: BaseMessage, tokens: int) -> tuple[str, BaseMessage] | None:
        """The owning source's stricter rendering of `message`, when it has one."""
        source = self.owner(message)
        if source is None:
            return None
        rendered = source.render(message, tokens, self.ctx, emergency=True)
        return None if rendered is None else (source.name, rendered)
