"""Telemetry through the OpenTelemetry API.

Without a configured SDK (telemetry disabled, the default in tests) every call here is a
no-op of the API itself. The backend installs SDK providers and exporters at startup when
telemetry is enabled; nothing in chat_shell needs to know which.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import metrics, trace

tracer = trace.get_tracer("chat_shell")
meter = metrics.get_meter("chat_shell")


def record_protection(operation: str, status: str, **attributes: Any) -> None:
    """A `context_protection.<operation>` span event on the current span (SPEC 5.8).

    Call it only when something happened. `None` attributes are dropped; `tokens_saved` is
    derived from `before_tokens`/`after_tokens` when both are given.
    """
    attrs = {key: value for key, value in attributes.items() if value is not None}
    before, after = attrs.get("before_tokens"), attrs.get("after_tokens")
    if isinstance(before, int) and isinstance(after, int) and "tokens_saved" not in attrs:
        attrs["tokens_saved"] = max(0, before - after)
    attrs["status"] = status
    trace.get_current_span().add_event(f"context_protection.{operation}", attributes=attrs)


def sdk_installed() -> bool:
    """Whether an SDK tracer provider is installed (telemetry enabled in this process)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
