"""The metric instruments operators scrape (SPEC 5.8), and their bounded labels.

Names follow OpenTelemetry conventions; the Prometheus exporter turns `chat_shell.turns` into
`chat_shell_turns_total` and so on (see `deploy/grafana`). Labels are bounded: a model profile
label is a configured or built-in family name, never a free-form string a user typed, and no
label ever carries a user, conversation or turn id.
"""

from __future__ import annotations

from functools import lru_cache

from opentelemetry import metrics

from chat_shell.providers.profiles import builtin_profiles

_meter = metrics.get_meter("chat_shell")

# Bucket boundaries, installed as SDK views by the backend (the API cannot set them).
UTILIZATION_BUCKETS = (0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0, 1.1, 1.5)
DURATION_MS_BUCKETS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 120_000)

turns = _meter.create_counter("chat_shell.turns", unit="{turn}", description="Turns by termination reason")
model_calls = _meter.create_counter(
    "chat_shell.model.calls", unit="{call}", description="Model calls by purpose and outcome"
)
input_tokens = _meter.create_counter(
    "chat_shell.model.input_tokens", unit="{token}", description="Provider-reported input tokens"
)
output_tokens = _meter.create_counter(
    "chat_shell.model.output_tokens", unit="{token}", description="Provider-reported output tokens"
)
context_utilization = _meter.create_histogram(
    "chat_shell.context.utilization",
    unit="1",
    description="Per turn, the meter's used over available input of the request the turn leaves",
)
compactions = _meter.create_counter(
    "chat_shell.compactions", unit="{compaction}", description="Compactions by strategy and status"
)
tokens_saved = _meter.create_counter(
    "chat_shell.compaction.tokens_saved", unit="{token}", description="Tokens removed by compactions"
)
compaction_duration = _meter.create_histogram(
    "chat_shell.compaction.duration", unit="ms", description="Duration of a compaction"
)
emergency_truncations = _meter.create_counter(
    "chat_shell.emergency_truncations",
    unit="{compaction}",
    description="Emergency-stage rewrites (stricter truncation, tail drops)",
)
refusals = _meter.create_counter(
    "chat_shell.refusals", unit="{turn}", description="Turns refused because the request could not fit"
)
overflow_errors = _meter.create_counter(
    "chat_shell.provider.overflow_errors",
    unit="{error}",
    description="Context-length errors the provider returned",
)
time_to_first_token = _meter.create_histogram(
    "chat_shell.time_to_first_token", unit="ms", description="Turn start to the first streamed text"
)

# MCP tool calls, labelled by server and tool (both from the operator's configuration and the
# servers' own tool lists) and the call's outcome: ok, error, timeout, unavailable, cancelled.
mcp_tool_calls = _meter.create_counter(
    "chat_shell.mcp.tool_calls", unit="{call}", description="MCP tool calls by server, tool and outcome"
)
mcp_tool_duration = _meter.create_histogram(
    "chat_shell.mcp.tool_duration", unit="ms", description="Duration of an MCP tool call"
)


@lru_cache(maxsize=1024)
def profile_label(model: str, default_model: str | None = None) -> str:
    """A bounded label for a model name: the configured default, a built-in family, or `other`."""
    if model == default_model:
        return model
    key = model.lower()
    profiles = builtin_profiles()
    if key in profiles:
        return key
    families = [name for name in profiles if key.startswith(name)]
    return max(families, key=len) if families else "other"
