"""A span exporter that accepts and drops spans: the SDK's full processing path (batching,
attribute copies, export calls) without a network, for the telemetry overhead benchmark."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class DiscardingExporter(SpanExporter):
    def __init__(self) -> None:
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exported += len(spans)
        return SpanExportResult.SUCCESS
