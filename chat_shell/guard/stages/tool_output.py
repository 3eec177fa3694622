"""The tool-output source (SPEC 5.2.1): over-budget tool results become a stable compact form.

    [tool_output name=run_shell total_tokens=52340 kept_tokens=14790 truncated_tokens=37550]
    <head: about 60% of the kept tokens>
    [… 37550 tokens truncated …]
    <tail: the rest>
    [exit_code=0 wall_time=1.2s]                       (only when known)
    [hint: ...how to get the rest...]

Only outputs over the tool's budget change, and results with pictures
(`chat_shell.messages.tool_images`): the model is shown those its input takes and the budget
holds, the others keep only their placeholder line. The compact message keeps the original id (an
upsert into state) and is marked `compacted`. Re-rendering is idempotent: a compact form that
fits its policy is left alone, and a stricter policy re-cuts the kept head and tail without
nesting headers, while `total_tokens` keeps describing the original output. The raw output is
never touched here: the runtime shows it to the user from the tool result itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from chat_shell.accounting.text_counter import HEAD_SHARE
from chat_shell.accounting.token_counter import IMAGE_PART_TOKENS, TokenCounter, image_room
from chat_shell.guard.stages.source import EMERGENCY_RATIO, SourceContext
from chat_shell.messages import tool_images
from chat_shell.messages.convert import tool_output_text
from chat_shell.messages.markers import is_compacted, with_markers

# Below this many kept tokens a compact form would say nothing useful; the policy floor.
MIN_KEPT_TOKENS = 32
_FIT_ATTEMPTS = 4

_HEADER = re.compile(
    r"\[tool_output name=(?P<name>[^\s\]]+) total_tokens=(?P<total>\d+) "
    r"kept_tokens=(?P<kept>\d+) truncated_tokens=(?P<cut>\d+)\]"
)
_FOOTER = re.compile(r"\[(?=exit_code=|wall_time=)(?:exit_code=-?\d+)? ?(?:wall_time=\d+(?:\.\d+)?s)?\]")
_HINT_PREFIX = "[hint: "
# Argument names by which a tool (built-in or MCP) offers to page through its output.
PAGING_ARGUMENTS = ("offset", "cursor", "page", "start", "start_line", "skip")


@dataclass(frozen=True)
class CompactParts:
    name: str
    total_tokens: int
    head: str
    tail: str
    footer: str | None
    # The tool's paging argument, named in the hint (None: the tool has none).
    paging: str | None = None


def _tool_label(name: str | None) -> str:
    label = re.sub(r"\s+", "_", name or "").replace("]", "").replace("[", "")
    return label or "unknown"


def _marker(cut: int) -> str:
    return f"[… {cut} tokens truncated …]"


def _hint(name: str, cut: int, paging: str | None) -> str:
    how = (
        f"call {name} again with its `{paging}` argument moved past the part shown here"
        if paging
        else f"call {name} again with narrower arguments: a filter, a range or a smaller limit"
    )
    left_out = f"{cut} tokens of this output are left out here (the user sees all of it)"
    return f"{_HINT_PREFIX}{left_out}. To read them, {how}.]"


def paging_arguments(schemas: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Tool name -> the argument of its function schema that pages through its output."""
    found: dict[str, str] = {}
    for schema in schemas:
        function = schema.get("function", schema)
        properties = (function.get("parameters") or {}).get("properties") or {}
        paging = next((name for name in PAGING_ARGUMENTS if name in properties), None)
        if paging is not None and isinstance(function.get("name"), str):
            found[function["name"]] = paging
    return found


def footer_for(message: ToolMessage) -> str | None:
    """`[exit_code=… wall_time=…s]` from the tool's artifact, when the tool reported them."""
    artifact = message.artifact if isinstance(message.artifact, Mapping) else {}
    parts = []
    if isinstance(artifact.get("exit_code"), int):
        parts.append(f"exit_code={artifact['exit_code']}")
    if isinstance(artifact.get("wall_time_s"), int | float):
        parts.append(f"wall_time={float(artifact['wall_time_s']):.1f}s")
    return f"[{' '.join(parts)}]" if parts else None


def render(parts: CompactParts, counter: TokenCounter) -> str:
    kept = counter.count_text(parts.head) + counter.count_text(parts.tail)
    cut = max(0, parts.total_tokens - kept)
    lines = [
        f"[tool_output name={parts.name} total_tokens={parts.total_tokens} kept_tokens={kept} "
        f"truncated_tokens={cut}]",
        parts.head,
        _marker(cut),
        parts.tail,
    ]
    if parts.footer:
        lines.append(parts.footer)
    lines.append(_hint(parts.name, cut, parts.paging))
    return "\n".join(lines)


def parse(text: str) -> CompactParts | None:
    """The parts of a compact form this module rendered, or None if `text` is not one."""
    header_end = text.find("\n")
    header = _HEADER.fullmatch(text[:header_end]) if header_end > 0 else None
    hint_start = text.rfind("\n" + _HINT_PREFIX)
    if header is None or hint_start < header_end:
        return None
    body = text[header_end + 1 : hint_start]
    footer = None
    footer_start = body.rfind("\n")
    if footer_start >= 0 and _FOOTER.fullmatch(body[footer_start + 1 :]):
        body, footer = body[:footer_start], body[footer_start + 1 :]
    marker = "\n" + _marker(int(header["cut"])) + "\n"
    split = ("\n" + body + "\n").find(marker)
    if split < 0:
        return None
    head = body[: max(0, split - 1)] if split > 0 else ""
    tail = body[split + len(marker) - 1 :]
    return CompactParts(header["name"], int(header["total"]), head, tail, footer)


def _fit(
    name: str,
    total: int,
    head_from: str,
    tail_from: str,
    footer: str | None,
    limit: int,
    counter: TokenCounter,
    paging: str | None,
) -> str:
    """Cut `head_from`/`tail_from` so the whole compact form fits `limit` tokens."""
    framing = counter.count_text(render(CompactParts(name, total, "", "", footer, paging), counter))
    keep = max(MIN_KEPT_TOKENS, limit - framing - 8)
    text = ""
    for _ in range(_FIT_ATTEMPTS):
        head = counter.text.head(head_from, int(keep * HEAD_SHARE))
        tail_budget = keep - counter.count_text(head)
        tail = counter.text.tail(tail_from, tail_budget)
        if head_from is tail_from and len(head) + len(tail) > len(tail_from):
            tail = tail_from[len(head) :]  # never repeat text the head already holds
        text = render(CompactParts(name, total, head, tail, footer, paging), counter)
        over = counter.count_text(text) - limit
        if over <= 0 or keep == MIN_KEPT_TOKENS:
            break
        keep = max(MIN_KEPT_TOKENS, keep - over - 2)
    return text


def compact(message: ToolMessage, limit: int, counter: TokenCounter, paging: str | None = None) -> str | None:
    """The compact content of `message` under `limit` tokens, or None when it already fits;
    `paging` names the tool's paging argument for the hint."""
    content = message.content
    if counter.count_content(content) <= limit:
        return None
    parts = parse(content) if isinstance(content, str) and is_compacted(message) else None
    if parts is not None:  # already compact: re-cut the kept text, keep the original total
        text = _fit(
            parts.name, parts.total_tokens, parts.head, parts.tail, parts.footer, limit, counter, paging
        )
    else:
        body = tool_output_text(content)  # the text the user's tool block shows
        total = counter.count_text(body)
        label = _tool_label(message.name)
        text = _fit(label, total, body, body, footer_for(message), limit, counter, paging)
    return None if text == content else text


@dataclass(frozen=True)
class ToolOutputSource:
    """Compacts tool results over the per-tool budget of the profile (default 15,000 tokens),
    and decides which pictures of a tool result the model is shown (`images`: the model takes
    images): at most half of that budget's worth, the rest keep their placeholder with the
    reason (`chat_shell.messages.tool_images`)."""

    name: str = "tool_output"
    adds_content: bool = False
    images: bool = False

    def applies_to(self, message: BaseMessage) -> bool:
        return isinstance(message, ToolMessage)

    async def prepare(self, messages: Sequence[BaseMessage], ctx: SourceContext) -> None:
        return None  # everything it needs is in the message

    def render(
        self, message: BaseMessage, tokens: int, ctx: SourceContext, *, emergency: bool
    ) -> BaseMessage | None:
        if not isinstance(message, ToolMessage):
            return None
        limit = ctx.budget.tool_output_limit(message.name)
        if emergency:
            limit = max(1, int(limit * EMERGENCY_RATIO))
        with_pictures = tool_images.split(message.content)
        if with_pictures is not None:
            return self._render_pictures(message, *with_pictures, limit, ctx)
        if tokens <= limit:  # the whole message fits, so its content does
            return None
        text = compact(message, limit, ctx.counter, ctx.paging.get(message.name or ""))
        if text is None:
            return None
        shown = message.model_copy(update={"content": text})
        return with_markers(shown, compacted=True, token_count=None)

    def _render_pictures(
        self, message: ToolMessage, text: str, pictures: list[dict[str, Any]], limit: int, ctx: SourceContext
    ) -> BaseMessage | None:
        """A result with pictures: those the budget holds, and its text cut to the rest."""
        room = image_room(limit) if self.images else 0
        kept, dropped = pictures[:room], pictures[room:]
        if dropped:
            reason = (
                f"the tool output budget holds {room} of its {len(pictures)} images"
                if self.images
                else tool_images.NO_IMAGE_INPUT
            )
            text = tool_images.without_pictures(text, dropped, reason)
        alone = message.model_copy(update={"content": text})
        cut = compact(
            alone,
            max(1, limit - len(kept) * IMAGE_PART_TOKENS),
            ctx.counter,
            ctx.paging.get(message.name or ""),
        )
        content = tool_images.joined(text if cut is None else cut, kept)
        if content == message.content:
            return None
        shown = message.model_copy(update={"content": content})
        # Cut to fit (text or pictures) is compacted; a model without image input is not told
        # less than it can read.
        if cut is not None or (dropped and self.images):
            return with_markers(shown, compacted=True, token_count=None)
        return with_markers(shown, token_count=None)

    def attribute(self, message: BaseMessage, tokens: int, ctx: SourceContext) -> Mapping[str, int]:
        return {}  # tool messages already count as `tool_outputs`
