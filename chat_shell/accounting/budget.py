"""Budget math per model profile (SPEC 4): pure functions of the profile, no I/O.

The window is split into a flat reserved-output buffer and the available input. Every other
knob (trigger, keep, chunk size, fixed overhead, summary cap, tool and attachment budgets) is
derived from the available input unless the profile overrides it, and the token defaults
shrink with small windows so a 4k-token model gets proportionate budgets instead of the
defaults meant for a 128k window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from chat_shell.providers.profiles import ModelProfile

RESERVED_SHARE = 0.10
RESERVED_MIN = 16_000
RESERVED_MAX = 48_000
TRIGGER_SHARE = 0.85
KEEP_SHARE = 0.45
# The pre-trigger of compaction ahead of time, as a share of the trigger.
PRE_TRIGGER_SHARE = 0.7
# Share of the trigger from which the context is reported as `warning` (the meter's colour).
WARNING_SHARE = 0.9

TRIM_TOKENS_TO_SUMMARIZE = 12_000
OVERHEAD_TOKENS = 4_000
SUMMARY_MAX_TOKENS = 1_500
TOOL_OUTPUT_TOKENS = 15_000
ATTACHMENT_PREVIEW_TOKENS = 15_000

# Caps relative to the available input, so small windows get proportionate defaults.
OVERHEAD_MAX_SHARE = 0.15
TOOL_OUTPUT_MAX_SHARE = 0.25
ATTACHMENT_MAX_SHARE = 0.25
SUMMARY_MAX_SHARE = 0.10
# The tool schemas bound to the model (built-in and MCP tools) may take at most this share of
# the available input; a conversation whose enabled servers need more is refused
# (docs/features.md "MCP servers").
TOOL_SCHEMAS_MAX_SHARE = 0.25


@dataclass(frozen=True)
class Budget:
    context_window: int
    reserved_output: int
    available_input: int
    trigger: int
    keep: int
    trim_tokens_to_summarize: int
    overhead_tokens: int
    summary_max_tokens: int
    tool_output_tokens: int
    attachment_preview_tokens: int
    tool_output_overrides: dict[str, int] = field(default_factory=dict)
    # At or above this, the request a finished turn leaves for the next one is compacted ahead
    # of time (in the background, between turns); None: `PRE_TRIGGER_SHARE` x trigger.
    pre_trigger: int | None = None

    @property
    def ahead_trigger(self) -> int:
        """The pre-trigger of compaction ahead of time (never above the trigger)."""
        if self.pre_trigger is not None:
            return min(self.pre_trigger, self.trigger)
        return int(self.trigger * PRE_TRIGGER_SHARE)

    @property
    def ahead_keep(self) -> int:
        """What a compaction ahead of time aims for: `keep` lowered by as much as the
        pre-trigger sits below the trigger, so that compactions come as far apart as inline ones
        (the same number of summarizer calls over a conversation), never below a third of
        `keep`. The finished turn itself is always kept whole, whatever this leaves room for."""
        return max(self.keep - (self.trigger - self.ahead_trigger), self.keep // 3)

    @property
    def warning_from(self) -> int:
        """The smallest estimate reported as `warning`: the server's snapshots and the meter's
        rescaling to another model both compare against this one number."""
        return math.ceil(self.trigger * WARNING_SHARE)

    def tool_output_limit(self, tool_name: str | None) -> int:
        """The per-tool output budget: the tool's override, else the default."""
        if tool_name is not None and tool_name in self.tool_output_overrides:
            return self.tool_output_overrides[tool_name]
        return self.tool_output_tokens

    @property
    def tool_schemas_limit(self) -> int:
        """The most tokens the offered tools' schemas may take."""
        return int(self.available_input * TOOL_SCHEMAS_MAX_SHARE)

    def compaction_target(self, effective_tokens: int, *, forced: bool) -> int:
        """The size a compaction aims for: `keep`; when the provider overflowed although the
        estimate fit (forced), also at most half of that estimate, since it was evidently low."""
        return min(self.keep, effective_tokens // 2) if forced else self.keep


def reserved_output(context_window: int, max_output_tokens: int) -> int:
    """`min(clamp(window × 0.10, 16k, 48k), max_output_tokens, window / 2)`."""
    flat = min(max(int(context_window * RESERVED_SHARE), RESERVED_MIN), RESERVED_MAX)
    return max(0, min(flat, max_output_tokens, context_window // 2))


def _scaled(default: int, available: int, share: float) -> int:
    return max(1, min(default, int(available * share)))


def _explicit(value: int, available: int) -> int:
    return max(1, min(value, available))


def _setting(value: int | None, bound: int, default: int) -> int:
    """A profile's explicit figure, kept within 1..bound; its default when it sets none."""
    return default if value is None else _explicit(value, bound)


def budget_for(profile: ModelProfile) -> Budget:
    window = profile.context_window
    reserved = reserved_output(window, profile.max_output_tokens)
    available = max(1, window - reserved)

    trigger = _setting(profile.trigger_tokens, available, int(available * TRIGGER_SHARE))
    keep = min(_setting(profile.keep_tokens, available, int(available * KEEP_SHARE)), trigger)
    pre_trigger = _setting(profile.pre_trigger_tokens, trigger, int(trigger * PRE_TRIGGER_SHARE))
    summary_cap = _setting(
        profile.summary_max_tokens, available, _scaled(SUMMARY_MAX_TOKENS, available, SUMMARY_MAX_SHARE)
    )
    # The summarizer is the same model: a chunk plus the summary it produces must fit its input.
    chunk_room = max(1, available - summary_cap)
    chunk = _setting(profile.trim_tokens_to_summarize, chunk_room, min(TRIM_TOKENS_TO_SUMMARIZE, chunk_room))
    overhead = (
        max(0, min(profile.overhead_tokens, available))
        if profile.overhead_tokens is not None
        else _scaled(OVERHEAD_TOKENS, available, OVERHEAD_MAX_SHARE)
    )
    tool_output = _setting(
        profile.tool_output_tokens, available, _scaled(TOOL_OUTPUT_TOKENS, available, TOOL_OUTPUT_MAX_SHARE)
    )
    attachment = _setting(
        profile.attachment_preview_tokens,
        available,
        _scaled(min(window // 2, ATTACHMENT_PREVIEW_TOKENS), available, ATTACHMENT_MAX_SHARE),
    )
    overrides = {name: _explicit(tokens, available) for name, tokens in profile.tool_output_overrides.items()}
    return Budget(
        context_window=window,
        reserved_output=reserved,
        available_input=available,
        trigger=trigger,
        keep=keep,
        trim_tokens_to_summarize=chunk,
        overhead_tokens=overhead,
        summary_max_tokens=summary_cap,
        tool_output_tokens=tool_output,
        attachment_preview_tokens=attachment,
        tool_output_overrides=overrides,
        pre_trigger=pre_trigger,
    )
