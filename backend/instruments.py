"""Delivery metrics of the backend (SPEC 5.8): open SSE streams and resumed streams."""

from __future__ import annotations

from opentelemetry import metrics

_meter = metrics.get_meter("chat_shell.backend")

active_streams = _meter.create_up_down_counter(
    "chat_shell.streams.active", unit="{stream}", description="SSE streams open right now"
)
stream_resumes = _meter.create_counter(
    "chat_shell.stream.resumes",
    unit="{stream}",
    description="Streams opened with Last-Event-ID or ?after= (reconnects that resume a turn)",
)
