"""Conversations seeded straight into the database, in the stored formats of the runtime.

Chains are stored as `ChainMessage.model_dump(mode="json", exclude_none=True,
exclude_defaults=True)`, summaries marked `summary_compacted`, retained clones
`checkpoint_retained`: what the runtime and the compaction stage persist. Timestamps and ids are
deterministic, so the same seed in two fresh databases gives identical rows.

`CASES` is the table the history tests run: each case seeds one situation and names the
conversation whose history is asked for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Conversation, Message, MessageStatus, Role, User
from backend.services.conversations.lineage import find_visible_message, lineage
from chat_shell.contracts import ChainMessage, ChainMetadata, TokenCount, ToolCall
from chat_shell.events.fold import PARAGRAPH_BREAK

BASE_TIME = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
# How the compaction stage opens a summary; recognition is by marker, never by these words.
SUMMARY_PREFIX = "[Summary of earlier turns]"


def ai(text: str = "", *calls: ToolCall, **markers: Any) -> ChainMessage:
    return ChainMessage(
        role="assistant", content=text, tool_calls=list(calls), metadata=ChainMetadata(**markers)
    )


def call(call_id: str, name: str = "generate_report", **args: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, args=args)


def tool(call_id: str, output: str, name: str = "generate_report", **markers: Any) -> ChainMessage:
    return ChainMessage(
        role="tool", content=output, tool_call_id=call_id, name=name, metadata=ChainMetadata(**markers)
    )


def summary(text: str) -> ChainMessage:
    return ChainMessage(
        role="user",
        content=f"{SUMMARY_PREFIX}\n{text}",
        metadata=ChainMetadata(summary_compacted=True, summary_version=1),
    )


def retained(role: str, text: str) -> ChainMessage:
    return ChainMessage(role=role, content=text, metadata=ChainMetadata(checkpoint_retained=True))  # type: ignore[arg-type]


def stored(chain: Sequence[ChainMessage]) -> list[dict[str, Any]]:
    return [entry.model_dump(mode="json", exclude_none=True, exclude_defaults=True) for entry in chain]


def text_blocks(*parts: str | dict[str, Any]) -> list[dict[str, Any]]:
    """Blocks as the one fold of a turn's events stores them: text after a tool block opens
    with the paragraph break the stream showed, so `value` is the texts concatenated."""
    return [{"type": "text", "text": part} if isinstance(part, str) else part for part in parts]


def tool_block(call_id: str, output: str, name: str = "generate_report", **args: Any) -> dict[str, Any]:
    """A tool call's block among `text_blocks`: its arguments and the output the stream showed."""
    return {"type": "tool", "call_id": call_id, "name": name, "args": args, "output": output}


def around_a_tool(before: str, block: dict[str, Any], after: str) -> dict[str, Any]:
    """The `value` and `blocks` of a reply that said `before`, ran the tool of `block`, then
    said `after`: the text after the tool opens with the paragraph break the stream showed."""
    after = PARAGRAPH_BREAK + after
    return {"value": before + after, "blocks": text_blocks(before, block, after)}


class Seeder:
    """Writes users, conversations and turns; message ids and timestamps follow insertion order."""

    def __init__(self, db: AsyncSession, owner: User) -> None:
        self.db = db
        self.owner = owner
        self._clock = 0

    def _now(self) -> datetime:
        self._clock += 1
        return BASE_TIME + timedelta(minutes=self._clock)

    async def conversation(
        self, title: str, forked_from: tuple[Conversation, int] | None = None
    ) -> Conversation:
        parent, at = forked_from if forked_from else (None, 0)
        conversation = Conversation(
            owner_id=self.owner.id,
            title=title,
            forked_from_conversation_id=parent.id if parent else None,
            forked_from_message_id=at if parent else None,
            next_message_id=at + 1,
            created_at=self._now(),
            updated_at=self._now(),
        )
        self.db.add(conversation)
        await self.db.flush()
        if parent is not None and at:
            point = await find_visible_message(self.db, await lineage(self.db, parent), at)
            assert point is not None, f"no message {at} to fork at"
            conversation.current_leaf_pk = point.id
        return conversation

    def go_on_from(self, conversation: Conversation, message: Message | None) -> None:
        """The next message follows `message` (None: a new first message), making a new
        version of the one that followed it before, as regenerate and edit do."""
        conversation.current_leaf_pk = message.id if message is not None else None

    async def user_message(self, conversation: Conversation, text: str) -> Message:
        return await self._add(conversation, Role.USER, MessageStatus.COMPLETED, text, None)

    async def reply(
        self,
        conversation: Conversation,
        *,
        chain: Sequence[ChainMessage] = (),
        value: str | None = None,
        status: str = MessageStatus.COMPLETED,
        blocks: list[dict[str, Any]] | None = None,
        error: str | None = None,
    ) -> Message:
        """An assistant row; `value` defaults to the chain's last assistant text."""
        if value is None:
            value = next((e.content for e in reversed(chain) if e.role == "assistant" and e.content), "")
            assert isinstance(value, str)
        result: dict[str, Any] = {
            "value": value,
            "blocks": blocks if blocks is not None else (text_blocks(value) if value else []),
            "messages_chain": stored(chain),
            "termination_reason": "normal_completion" if status == MessageStatus.COMPLETED else status,
        }
        if error:
            result["error"] = {"code": status, "message": error}
        return await self._add(conversation, Role.ASSISTANT, status, "", result)

    async def turn(
        self, conversation: Conversation, text: str, *chain: ChainMessage, **reply: Any
    ) -> Message:
        await self.user_message(conversation, text)
        return await self.reply(conversation, chain=chain, **reply)

    async def _add(
        self, conversation: Conversation, role: Role, status: str, content: str, result: dict[str, Any] | None
    ) -> Message:
        stamp = self._now()
        message = Message(
            conversation_id=conversation.id,
            message_id=conversation.next_message_id,
            role=role,
            status=status,
            content=content,
            result=result,
            has_checkpoint=any(
                entry.get("metadata", {}).get("summary_compacted")
                for entry in (result or {}).get("messages_chain", [])
            ),
            created_at=stamp,
            updated_at=stamp,
            parent_pk=conversation.current_leaf_pk,
        )
        conversation.next_message_id += 1
        self.db.add(message)
        await self.db.flush()
        conversation.current_leaf_pk = message.id
        return message


# ---------------------------------------------------------------------------------------------
# The case table
# ---------------------------------------------------------------------------------------------


Row = tuple[str, Any, frozenset[str]]


@dataclass(frozen=True)
class Case:
    name: str
    seed: Callable[[Seeder], Awaitable[Conversation]]
    # The expected model-visible history (from the latest compaction, no limit) as
    # (role, content, markers) with markers the set of true marker flags; written with `rows`.
    expected: list[Row]


# The marker words of `rows` and the flags they stand for.
MARKERS = {"summary": "summary_compacted", "retained": "checkpoint_retained", "compacted": "compacted"}


def rows(table: str) -> list[Row]:
    """Expected history rows, one a line as `role [marker ...] | content`: a `summary` row's
    content is its text after the summary's opening, as `summary()` writes it."""
    expected: list[Row] = []
    for line in filter(None, (line.strip() for line in table.splitlines())):
        head, content = (part.strip() for part in line.split("|", 1))
        role, *words = head.split()
        if "summary" in words:
            content = f"{SUMMARY_PREFIX}\n{content}"
        expected.append((role, content, frozenset(MARKERS[word] for word in words)))
    return expected


async def _no_checkpoint(s: Seeder) -> Conversation:
    c = await s.conversation("no checkpoint")
    await s.turn(c, "Plan a 3-day trip to Kyoto under ¥50,000.", ai("Day 1: Fushimi Inari."))
    await s.turn(
        c,
        "Check prices.",
        ai("Let me check.", call("call_p", rows=2, seed=1, note=None)),
        tool(
            "call_p",
            "[compact report: 2 rows kept]",
            compacted=True,
            token_count=TokenCount(encoding="cl100k_base", content_hash="abc", tokens=7),
        ),
        ai("Prices are fine.", local_input_tokens=812, provider_input_tokens=840, profile="gpt-4o"),
        **around_a_tool("Let me check.", tool_block("call_p", "r" * 50), "Prices are fine."),
    )
    await s.turn(c, f"{SUMMARY_PREFIX} is how I start notes; keep the budget.", ai("Noted."))
    return c


async def _newest_checkpoint_wins(s: Seeder) -> Conversation:
    c = await s.conversation("two checkpoints")
    await s.turn(c, "one", ai("r1"))
    await s.turn(c, "two", summary("S1: one, two"), retained("user", "two"), ai("r2"))
    await s.turn(c, "three", ai("r3"))
    await s.turn(
        c, "four", summary("S2: one to four"), retained("assistant", "r3"), retained("user", "four"), ai("r4")
    )
    await s.turn(c, "five", ai("r5"))
    return c


async def _fork_of_fork(s: Seeder) -> Conversation:
    root = await s.conversation("root")
    await s.turn(root, "r-one", ai("a1"))  # 1, 2
    await s.turn(root, "r-two", summary("S-root: r-one, r-two"), retained("user", "r-two"), ai("a2"))  # 3, 4
    await s.turn(root, "r-three", ai("a3"))  # 5, 6
    # A newer checkpoint after the fork point: not part of any fork's history.
    await s.turn(root, "r-four", summary("S-late"), retained("user", "r-four"), ai("a4"))  # 7, 8
    child = await s.conversation("child", forked_from=(root, 6))
    await s.turn(child, "c-four", ai("c4"))  # 7, 8
    grandchild = await s.conversation("grandchild", forked_from=(child, 8))
    await s.turn(grandchild, "g-five", ai("g5"))  # 9, 10
    return grandchild


async def _interrupted_after_checkpoint(s: Seeder) -> Conversation:
    c = await s.conversation("interrupted")
    await s.turn(c, "one", ai("r1"))
    await s.turn(c, "two", summary("S: one, two"), retained("user", "two"), ai("r2"))
    await s.turn(
        c,
        "three",
        status=MessageStatus.INTERRUPTED,
        value="Half of the thi",
        error="The service restarted while this reply was being written.",
    )
    return c


async def _failed_partial(s: Seeder) -> Conversation:
    c = await s.conversation("failed")
    await s.turn(c, "one", ai("r1"))
    await s.turn(
        c,
        "two",
        ai("Let me check.", call("call_f", rows=1)),
        tool("call_f", "report"),
        status=MessageStatus.FAILED,
        **around_a_tool("Let me check.", tool_block("call_f", "report", rows=1), "The answer is 4"),
        error="the provider stream failed",
    )
    await s.turn(c, "three", ai("r3"))
    return c


async def _cancelled_checkpoint(s: Seeder) -> Conversation:
    c = await s.conversation("cancelled")
    await s.turn(c, "one", ai("r1"))
    await s.turn(
        c,
        "two",
        summary("S: one"),
        retained("user", "two"),
        status=MessageStatus.CANCELLED,
        value="Stopped hal",
    )
    await s.turn(c, "three", ai("r3"))
    return c


async def _checkpoint_on_another_version(s: Seeder) -> Conversation:
    c = await s.conversation("edited away from a checkpoint")
    first = await s.turn(c, "one", ai("r1"))  # 1, 2
    await s.turn(c, "two", summary("S-other: one, two"), retained("user", "two"), ai("r2"))  # 3, 4
    s.go_on_from(c, first)  # "two" edited: a new version of message 3, beside the checkpoint
    await s.turn(c, "two, edited", ai("r2b"))  # 5, 6
    return c


async def _older_version_shown_again(s: Seeder) -> Conversation:
    c = await s.conversation("regenerated, then the first version shown again")
    await s.turn(c, "one", ai("r1"))  # 1, 2
    question = await s.user_message(c, "two")  # 3
    first = await s.reply(c, chain=[ai("first version")])  # 4
    s.go_on_from(c, question)
    await s.reply(c, chain=[summary("S-v2: one, two"), retained("user", "two"), ai("second version")])  # 5
    s.go_on_from(c, first)
    return c


async def _edit_below_a_checkpoint(s: Seeder) -> Conversation:
    c = await s.conversation("edited between two checkpoints")
    await s.turn(c, "one", ai("r1"))  # 1, 2
    await s.turn(c, "two", summary("S-above: one, two"), retained("user", "two"), ai("r2"))  # 3, 4
    third = await s.turn(c, "three", ai("r3"))  # 5, 6
    await s.turn(c, "four", summary("S-below: one to four"), retained("user", "four"), ai("r4"))  # 7, 8
    s.go_on_from(c, third)  # "four" edited: the checkpoint below the edit point is left behind
    await s.turn(c, "four, edited", ai("r4b"))  # 9, 10
    return c


CASES = [
    Case(
        "no_checkpoint",
        _no_checkpoint,
        rows(
            f"""
            user           | Plan a 3-day trip to Kyoto under ¥50,000.
            assistant      | Day 1: Fushimi Inari.
            user           | Check prices.
            assistant      | Let me check.
            tool compacted | [compact report: 2 rows kept]
            assistant      | Prices are fine.
            user           | {SUMMARY_PREFIX} is how I start notes; keep the budget.
            assistant      | Noted.
            """
        ),
    ),
    Case(
        "newest_checkpoint_wins",
        _newest_checkpoint_wins,
        rows(
            """
            user summary       | S2: one to four
            assistant retained | r3
            user retained      | four
            assistant          | r4
            user               | five
            assistant          | r5
            """
        ),
    ),
    Case(
        "fork_of_fork_with_ancestor_checkpoint",
        _fork_of_fork,
        rows(
            """
            user summary  | S-root: r-one, r-two
            user retained | r-two
            assistant     | a2
            user          | r-three
            assistant     | a3
            user          | c-four
            assistant     | c4
            user          | g-five
            assistant     | g5
            """
        ),
    ),
    Case(
        "interrupted_after_checkpoint",
        _interrupted_after_checkpoint,
        rows(
            """
            user summary  | S: one, two
            user retained | two
            assistant     | r2
            user          | three
            assistant     | Half of the thi
            """
        ),
    ),
    Case(
        "failed_turn_partial_text",
        _failed_partial,
        rows(
            """
            user      | one
            assistant | r1
            user      | two
            assistant | Let me check.
            tool      | report
            assistant | The answer is 4
            user      | three
            assistant | r3
            """
        ),
    ),
    Case(
        "cancelled_turn_holds_the_checkpoint",
        _cancelled_checkpoint,
        rows(
            """
            user summary  | S: one
            user retained | two
            assistant     | Stopped hal
            user          | three
            assistant     | r3
            """
        ),
    ),
    # Versions in place: history follows the path to the current leaf, and only a checkpoint
    # on that path opens it.
    Case(
        "checkpoint_on_another_version",
        _checkpoint_on_another_version,
        rows(
            """
            user      | one
            assistant | r1
            user      | two, edited
            assistant | r2b
            """
        ),
    ),
    Case(
        "older_version_shown_again",
        _older_version_shown_again,
        rows(
            """
            user      | one
            assistant | r1
            user      | two
            assistant | first version
            """
        ),
    ),
    Case(
        "edit_below_a_checkpoint",
        _edit_below_a_checkpoint,
        rows(
            """
            user summary  | S-above: one, two
            user retained | two
            assistant     | r2
            user          | three
            assistant     | r3
            user          | four, edited
            assistant     | r4b
            """
        ),
    ),
]


def shape(history: Sequence[ChainMessage]) -> list[Row]:
    return [
        (entry.role, entry.content, frozenset(f for f in MARKERS.values() if getattr(entry.metadata, f)))
        for entry in history
    ]


async def seed_cases(
    sessions: async_sessionmaker[AsyncSession], username: str, cases: Sequence[Case] = tuple(CASES)
) -> dict[str, int]:
    """Seeds every case for `username` (an existing user); the conversation id of each case."""
    made: dict[str, int] = {}
    async with sessions() as db, db.begin():
        owner = await db.scalar(select(User).where(User.username == username))
        assert owner is not None
        seeder = Seeder(db, owner)
        for case in cases:
            made[case.name] = (await case.seed(seeder)).id
    return made
