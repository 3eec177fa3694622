"""The end of an attempt's thread: its authoritative state read, the thread deleted whatever
happens, and one persistence line logged."""

from __future__ import annotations

import logging

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from chat_shell.agents.attempts import AttemptPlan
from chat_shell.agents.finalizer import without_step_limit_reply
from chat_shell.agents.serializer import serialize_chain
from chat_shell.agents.turn_context import TurnContext
from chat_shell.messages.markers import is_summary
from chat_shell.messages.tool_pairs import sanitize_tool_pairs, tool_pair_count

logger = logging.getLogger("chat_shell.runtime")


async def close_thread(
    saver: BaseCheckpointSaver,
    graph: CompiledStateGraph,
    config: RunnableConfig,
    plan: AttemptPlan,
    turn: TurnContext,
    ending: str,
) -> tuple[list[BaseMessage], tuple[str, ...]]:
    """The attempt's authoritative state; the thread is deleted whatever happens."""
    thread_id = config["configurable"]["thread_id"]
    pending: tuple[str, ...]
    messages, pending, checkpoints = plan.seed, (), -1
    try:
        snapshot = await graph.aget_state(config)
        if snapshot.values.get("messages"):
            messages = list(snapshot.values["messages"])
        pending = tuple(snapshot.next)
        checkpoints = len([c async for c in saver.alist(config)])
    finally:
        await saver.adelete_thread(thread_id)
        # Listed across threads: asking for this thread by config would re-create it.
        deleted = not [
            c async for c in saver.alist(None) if c.config["configurable"]["thread_id"] == thread_id
        ]
        _log_persistence(plan, turn, ending, messages, checkpoints, deleted)
    return messages, pending


def _log_persistence(
    plan: AttemptPlan,
    turn: TurnContext,
    ending: str,
    messages: list[BaseMessage],
    checkpoints: int,
    deleted: bool,
) -> None:
    sanitized = sanitize_tool_pairs(without_step_limit_reply(messages))
    logger.info(
        "[Persistence] turn=%s attempt=%s path=%s ending=%s chain=%d summary=%s tool_pairs=%d "
        "checkpoints=%d deleted=%s",
        turn.turn_id,
        plan.number,
        plan.reason,
        ending,
        len(serialize_chain(turn.produced(sanitized))),
        any(is_summary(m) for m in messages),
        tool_pair_count(sanitized),
        checkpoints,
        deleted,
    )
