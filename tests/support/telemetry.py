"""The process's OpenTelemetry SDK for tests: the real backend setup plus in-memory exporters.

The global providers can be installed once per process, so the first test that needs them
installs them with an in-memory span exporter and metric reader; later tests read deltas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from backend import telemetry as backend_telemetry
from backend.settings import Settings
from chat_shell.contracts import ChainMessage, ToolCall
from chat_shell.guard.context_guard import UnifiedContextGuard
from chat_shell.guard.factory import build_guard
from chat_shell.guard.protocol import GuardContext
from tests.support.texts import log_text


@dataclass(frozen=True)
class Recorded:
    telemetry: backend_telemetry.Telemetry
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader

    def finished_spans(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[tuple[dict[str, Any], NumberDataPoint | HistogramDataPoint]]:
        data = self.reader.get_metrics_data()
        found = []
        for resource_metrics in data.resource_metrics if data else ():
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found += [(dict(p.attributes or {}), p) for p in metric.data.data_points]
        return found

    def total(self, name: str, **labels: str) -> float:
        """The sum of a counter (or a histogram's count) over points matching `labels`."""
        total = 0.0
        for attributes, point in self.points(name):
            if all(attributes.get(k) == v for k, v in labels.items()):
                total += point.count if isinstance(point, HistogramDataPoint) else point.value
        return total

    def tally(self, **watched: Series) -> Tally:
        return Tally(self, watched)


@dataclass(frozen=True)
class Series:
    """A metric's points whose attributes include `labels`."""

    name: str
    labels: Mapping[str, str]


def series(name: str, **labels: str) -> Series:
    return Series(name, labels)


class Tally:
    """The totals of some series when it is made; `grown()` is what each has gained since. The
    metrics are cumulative for the process, so a test reads only the change its own work made."""

    def __init__(self, recorded: Recorded, watched: Mapping[str, Series]) -> None:
        self._recorded = recorded
        self._watched = dict(watched)
        self._before = self._totals()

    def _totals(self) -> dict[str, float]:
        return {key: self._recorded.total(s.name, **s.labels) for key, s in self._watched.items()}

    def grown(self) -> dict[str, float]:
        now = self._totals()
        return {key: now[key] - self._before[key] for key in now}


_recorded: Recorded | None = None


def install() -> Recorded:
    global _recorded
    if _recorded is None:
        spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
        installed = backend_telemetry.setup_telemetry(
            Settings(_env_file=None, telemetry_enabled=True),  # type: ignore[call-arg]
            span_processors=[SimpleSpanProcessor(spans)],
            metric_readers=[reader],
        )
        assert installed is not None
        assert installed.tracer_provider is not None
        _recorded = Recorded(installed, spans, reader)
    return _recorded


def children(spans: Iterable[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def events_named(span: ReadableSpan, name: str) -> list[Mapping[str, Any]]:
    return [dict(event.attributes or {}) for event in span.events if event.name == name]


# A 40,000-token window (4,000 output): these five tool outputs, each under the per-tool
# budget, put the request over the trigger, so a guard without a summary stage must rewrite
# the largest ones in the emergency stage.
EMERGENCY_WINDOW = {"context_window": 40_000, "max_output_tokens": 4_000}


def over_trigger_history() -> list[ChainMessage]:
    history = [ChainMessage(role="user", content="Check the worker logs, please.")]
    for index, chars in enumerate([15_000, 26_000, 21_000, 26_500, 18_000], start=1):
        call = ToolCall(id=f"call-{index}", name="read_logs", args={"part": index})
        history += [
            ChainMessage(role="assistant", tool_calls=[call]),
            ChainMessage(
                role="tool", tool_call_id=call.id, name="read_logs", content=log_text(chars, seed=index)
            ),
            ChainMessage(role="assistant", content=f"Part {index} read."),
        ]
    return history


def guard_without_summary(ctx: GuardContext) -> UnifiedContextGuard:
    """The real guard with its source stages and no summary stage."""
    return build_guard(replace(ctx, summarizer=None))
