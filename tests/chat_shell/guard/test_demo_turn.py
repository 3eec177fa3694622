"""The demonstration end to end: a real turn through the runtime and the scripted provider."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import tool

from chat_shell.accounting.text_counter import TiktokenText
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.guard.factory import build_guard
from chat_shell.tools.registry import ToolRegistry
from tests.support.scripted_provider import count_prompt_tokens, text, tool_call
from tests.support.texts import log_text
from tests.support.turns import collect, make_request

EXACT = TokenCounter(TiktokenText())
HIDDEN_OVERHEAD = 1_200


async def test_a_200000_character_tool_output_is_compact_for_the_model_and_whole_for_the_user(
    make_shell: Any, scripted_provider: Any
) -> None:
    raw = log_text(200_000)
    assert len(raw) == 200_000

    @tool
    async def dump_logs(service: str) -> str:
        """Return the whole log of a service."""
        return raw

    scripted_provider.hidden_overhead = HIDDEN_OVERHEAD
    shell = make_shell(tools=ToolRegistry([dump_logs]), guard_factory=build_guard)
    scripted_provider.script(
        tool_call("dump_logs", {"service": "worker"}), text("The worker log shows three timeouts.")
    )
    events = await collect(shell, make_request(content="What went wrong in the worker?"))
    completed = events[-1]
    assert completed.type == "turn.completed"
    result = completed.result

    # What the model saw (recorded by the provider): the compact form, within the tool budget.
    first, second = scripted_provider.requests
    (sent,) = [m for m in second["messages"] if m["role"] == "tool"]
    assert sent["content"].startswith("[tool_output name=dump_logs total_tokens=")
    assert EXACT.count_text(sent["content"]) <= 15_000
    # What the user sees: all 200,000 characters, flagged as shortened for the model.
    (done,) = [e for e in events if e.type == "tool.completed"]
    assert done.output == raw and done.truncated_for_model
    (block,) = [b for b in result.blocks if b.type == "tool"]
    assert block.output == raw and block.truncated_for_model

    # The chain keeps the compact form, per-message counts, and the calibration sample.
    chain = result.messages_chain
    (stored,) = [c for c in chain if c.role == "tool"]
    assert stored.content == sent["content"] and stored.metadata.compacted
    assert all(c.metadata.token_count is not None for c in chain)
    reply = next(c for c in chain if c.role == "assistant")
    assert reply.metadata.provider_input_tokens == count_prompt_tokens(first) + HIDDEN_OVERHEAD
    assert reply.metadata.local_input_tokens is not None and reply.metadata.profile == "gpt-4o"

    # Metrics in the stream, the final snapshot on the result.
    snapshots = [e.snapshot for e in events if e.type == "context.metrics"]
    assert snapshots[0].phase == "pre_turn"
    assert result.context_metrics is not None and result.context_metrics.phase == "final"
    assert sum(result.context_metrics.breakdown.values()) == result.context_metrics.used_input

    # Next turn from the stored chain: the same compact text reaches the model, not re-cut.
    scripted_provider.script(text("Yes, all three were on worker-3."))
    events = await collect(shell, make_request(2, "Were they on the same host?", history=chain))
    assert events[-1].type == "turn.completed"
    (resent,) = [m for m in scripted_provider.requests[-1]["messages"] if m["role"] == "tool"]
    assert resent["content"] == sent["content"]
