"""Agent assembly (SPEC 5.1): `create_react_agent` with the composed pre-model hook.

The graph is compiled once per model and reused by every turn; what differs per attempt (the
guard, the attempt guidance, the tools offered, the conversation the tools act for) travels in
the LangGraph run context (`AttemptRuntime`), never in module state.

The tool node holds every registered tool; the model node binds only the attempt's offered
`ToolSet` (a dynamic model: one binding per tool set, made once and cached), and a call of a
registered tool that was not offered gets the same error as an unknown tool.

Two variants exist per model: the tool loop, and an answer-only graph for the tool-limit
recovery reply. The answer-only graph still sends the offered tool schemas (with
`tool_choice="none"`), so a provider that insists on schemas for tool history accepts it and the
guard's budget counts the same request shape.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, create_react_agent
from langgraph.prebuilt.tool_node import INVALID_TOOL_NAME_ERROR_TEMPLATE, ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from chat_shell.contracts import ApprovalDecided, ApprovalRequested, ToolStarted
from chat_shell.messages.tool_images import tool_result_content
from chat_shell.tools.approvals import TurnApprovals, denied_message
from chat_shell.tools.mcp import CALL_RECORD_KEY, recording, server_of
from chat_shell.tools.registry import AttemptTools, tool_error_message
from chat_shell.tools.turn_tools import TurnTools

# LangGraph's own reply when the step budget runs out while the model still wants tools.
STEP_LIMIT_REPLY = "Sorry, need more steps to process this request."
# Graph steps per model<->tools round: pre_model_hook, agent, post_model_hook, tools.
STEPS_PER_ROUND = 4


class ToolCallTruncated(Exception):
    """The model hit its output limit while writing a tool call; the call must not run."""


@dataclass(frozen=True)
class AttemptRuntime:
    """The LangGraph run context of one attempt (`context=` of `astream`)."""

    hook: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
    conversation_id: int
    owner_id: int
    # The tools bound to the model (decided by the guard before each call; the turn's MCP tools
    # among them), and the turn's built-in tool state (shared by its attempts, so per-turn call
    # limits hold across retries).
    tools: AttemptTools
    turn_tools: TurnTools
    # The turn's "ask first" marks and the calls waiting for the user's decision.
    approvals: TurnApprovals = field(default_factory=TurnApprovals)


def recursion_limit(tool_rounds: int) -> int:
    """Enough graph steps for `tool_rounds` tool rounds and a final answer."""
    return STEPS_PER_ROUND * tool_rounds + 3


async def _pre_model_hook(state: dict[str, Any], runtime: Runtime[AttemptRuntime]) -> dict[str, Any]:
    return await runtime.context.hook(state)


def _answer_invalid_calls(reply: AIMessage) -> list[BaseMessage]:
    """Unparsable tool calls become calls answered by a tool error, so the model can fix them."""
    calls = list(reply.tool_calls)
    answers: list[BaseMessage] = []
    for bad in reply.invalid_tool_calls:
        call_id = bad.get("id") or f"call_invalid_{uuid.uuid4().hex[:12]}"
        name = bad.get("name") or "unknown_tool"
        calls.append({"id": call_id, "name": name, "args": {}, "type": "tool_call"})
        received = (bad.get("args") or "")[:300]
        answers.append(
            ToolMessage(
                content=(
                    f"Error: the arguments of this {name} call were not valid JSON, so the tool did not "
                    f"run. Received: {received!r}. Call the tool again with a JSON object."
                ),
                tool_call_id=call_id,
                name=name,
                status="error",
            )
        )
    return [reply.model_copy(update={"tool_calls": calls, "invalid_tool_calls": []}), *answers]


def _with_call_ids(reply: AIMessage) -> AIMessage:
    """Some OpenAI-compatible servers omit tool-call ids; results must be able to answer them."""
    if all(call["id"] for call in reply.tool_calls):
        return reply
    calls = [{**call, "id": call["id"] or f"call_{uuid.uuid4().hex[:12]}"} for call in reply.tool_calls]
    return reply.model_copy(update={"tool_calls": calls})


def _check_model_reply(state: dict[str, Any], runtime: Runtime[AttemptRuntime]) -> dict[str, Any]:
    """The post-model hook: stop on a truncated tool call, repair what would break the loop."""
    reply = state["messages"][-1]
    if not isinstance(reply, AIMessage) or not (reply.tool_calls or reply.invalid_tool_calls):
        return {}
    if reply.response_metadata.get("finish_reason") == "length":
        raise ToolCallTruncated("the model's output limit cut a tool call short")
    fixed = _with_call_ids(reply)
    if not fixed.invalid_tool_calls:
        return {} if fixed is reply else {"messages": [fixed]}
    repaired = _answer_invalid_calls(fixed)
    for answer in repaired:
        if isinstance(answer, ToolMessage):
            runtime.stream_writer(ToolStarted(call_id=answer.tool_call_id, name=answer.name or "", args={}))
    return {"messages": repaired}


def shaped_result(result: ToolMessage | Command) -> ToolMessage | Command:
    """A result made of parts (what MCP tools return) in the model-facing shape: text parts are
    one text, so the user's block, the guard's count and the compact form all see the text
    itself, not its JSON; media parts become placeholder lines, and the images a model may be
    shown follow the text as image parts (`chat_shell.messages.tool_images`)."""
    if not isinstance(result, ToolMessage) or not isinstance(result.content, list) or not result.content:
        return result
    shaped = tool_result_content(result.content)
    return result if shaped is None else result.model_copy(update={"content": shaped})


async def _announce_tool_call(
    request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]]
) -> ToolMessage | Command:
    call = request.tool_call
    # The graph's context (`context_schema`); `ToolCallRequest` does not carry its type.
    context = cast(AttemptRuntime, request.runtime.context)
    # The tools bound to the model call that asked for this one.
    offered = context.tools.current
    tool = offered.by_name.get(call["name"])
    if tool is None:
        # Registered but not offered in that call: answered like a tool that does not exist.
        return ToolMessage(
            INVALID_TOOL_NAME_ERROR_TEMPLATE.format(
                requested_tool=call["name"], available_tools=", ".join(offered.names)
            ),
            name=call["name"],
            tool_call_id=call["id"] or "",
            status="error",
        )
    # Through the graph's own stream, so the event stays in order with the model's tokens.
    write, call_id, server = request.runtime.stream_writer, call["id"] or "", server_of(tool)
    write(ToolStarted(call_id=call_id, name=call["name"], args=call["args"], server=server))
    approvals = context.approvals
    if approvals.asks(tool):
        write(ApprovalRequested(call_id=call_id, name=call["name"], args=call["args"], server=server))
        allowed = await approvals.wait(call_id)
        write(ApprovalDecided(call_id=call_id, allowed=allowed))
        if not allowed:
            return ToolMessage(
                denied_message(call["name"]), name=call["name"], tool_call_id=call_id, status="error"
            )
    # The turn's MCP tools are not in the tool node (they come and go with their servers).
    with recording() as record:
        result = shaped_result(
            await execute(request if request.tool is not None else request.override(tool=tool))
        )
    if isinstance(result, ToolMessage) and record.outcome is not None:
        measured = {"outcome": record.outcome, "duration_ms": record.duration_ms}
        result = result.model_copy(
            update={"response_metadata": {**result.response_metadata, CALL_RECORD_KEY: measured}}
        )
    return result


def _offered_model(model: BaseChatModel, *, answer_only: bool) -> Callable[..., Runnable[Any, BaseMessage]]:
    """The model node's model for an attempt: bound to the attempt's tool set (cached per set)."""
    bound: dict[tuple[tuple[str, ...], str], Runnable[Any, BaseMessage]] = {}

    def select(state: dict[str, Any], runtime: Runtime[AttemptRuntime]) -> Runnable[Any, BaseMessage]:
        offered = runtime.context.tools.current
        found = bound.get(offered.key)
        if found is None:
            if not offered.tools:
                found = model
            elif answer_only:
                found = model.bind_tools(list(offered.tools), tool_choice="none")
            else:
                found = model.bind_tools(list(offered.tools))
            bound[offered.key] = found
        return found

    return select


def build_agent(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    checkpointer: BaseCheckpointSaver,
    answer_only: bool = False,
) -> CompiledStateGraph:
    """The agent for `model`; `tools` is every tool it may run (each attempt offers a subset)."""
    if answer_only:
        return create_react_agent(
            _offered_model(model, answer_only=True),
            [],
            # langgraph's RunnableLike lists no (state, runtime) callable, though it passes the runtime.
            pre_model_hook=_pre_model_hook,  # type: ignore[arg-type]
            checkpointer=checkpointer,
            context_schema=AttemptRuntime,
        )
    tool_node = ToolNode(tools, handle_tool_errors=tool_error_message, awrap_tool_call=_announce_tool_call)
    return create_react_agent(
        _offered_model(model, answer_only=False),
        tool_node,
        # langgraph's RunnableLike lists no (state, runtime) callable, though it passes the runtime.
        pre_model_hook=_pre_model_hook,  # type: ignore[arg-type]
        post_model_hook=_check_model_reply,  # type: ignore[arg-type]
        checkpointer=checkpointer,
        context_schema=AttemptRuntime,
    )
