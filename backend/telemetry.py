"""The OpenTelemetry SDK, installed once per process (SPEC 5.8).

Standard `OTEL_*` environment variables choose what leaves the process:

- `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`: the resource (default service name `chat-shell`);
- `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`: sampling (default parent-based always-on);
- `OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER`: `otlp`, `console` or `none` (comma lists).
  Unset, traces and metrics go to OTLP only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or the
  signal's own endpoint) is set, and nowhere otherwise;
- `OTEL_EXPORTER_OTLP_*`: the OTLP/HTTP exporter's endpoint, headers, timeout;
- `OTEL_METRICS_EXEMPLAR_FILTER`: exemplars are off unless this asks for them (the Prometheus
  text at `/metrics` carries none, and sampling them costs every measurement CPU);
- `OTEL_SDK_DISABLED=true` (or `CHAT_SHELL_TELEMETRY_ENABLED=false`): nothing is installed and
  every instrument and span is the API's no-op.

Metrics are always readable as Prometheus text through `Telemetry.registry` (served at
`/metrics`), whatever else is exported. The global providers can be set once per process, so
a second call returns the first installation.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, ExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from prometheus_client import CollectorRegistry

from backend.settings import Settings
from chat_shell.observability import instruments

DEFAULT_SERVICE_NAME = "chat-shell"
VERSION = "0.1.0"

_lock = threading.Lock()
_installed: Telemetry | None = None


@dataclass(frozen=True)
class Telemetry:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    # Holds only this process's OpenTelemetry metrics (not prometheus_client's process collectors).
    registry: CollectorRegistry

    def flush(self) -> None:
        self.tracer_provider.force_flush()
        self.meter_provider.force_flush()


def telemetry_disabled(settings: Settings) -> bool:
    return not settings.telemetry_enabled or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true"


def setup_telemetry(
    settings: Settings,
    *,
    component: str = "backend",
    span_processors: Sequence[SpanProcessor] = (),
    metric_readers: Sequence[MetricReader] = (),
) -> Telemetry | None:
    """Installs the SDK unless telemetry is disabled; extra processors and readers (tests) are
    added only by the call that installs."""
    global _installed
    if telemetry_disabled(settings):
        return None
    with _lock:
        if _installed is None:
            _installed = _install(component, span_processors, metric_readers)
        return _installed


def installed() -> Telemetry | None:
    return _installed


def _resource(component: str) -> Resource:
    resource = Resource.create({SERVICE_VERSION: VERSION, "chat_shell.component": component})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


def _exporters(signal: str) -> list[str]:
    """The exporters named for a signal (`traces`, `metrics`), or OTLP when an endpoint is set."""
    named = os.environ.get(f"OTEL_{signal.upper()}_EXPORTER")
    if named is None:
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        )
        return ["otlp"] if endpoint else []
    names = [name.strip().lower() for name in named.split(",") if name.strip()]
    unknown = set(names) - {"otlp", "console", "none"}
    if unknown:
        raise ValueError(f"OTEL_{signal.upper()}_EXPORTER: unsupported exporter(s) {sorted(unknown)}")
    return [name for name in names if name != "none"]


def _span_exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _metric_reader(name: str) -> MetricReader:
    if name == "console":
        return PeriodicExportingMetricReader(ConsoleMetricExporter())
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return PeriodicExportingMetricReader(OTLPMetricExporter())


def _views() -> list[View]:
    ms = ExplicitBucketHistogramAggregation(instruments.DURATION_MS_BUCKETS)
    return [
        View(
            instrument_name="chat_shell.context.utilization",
            aggregation=ExplicitBucketHistogramAggregation(instruments.UTILIZATION_BUCKETS),
        ),
        View(instrument_name="chat_shell.compaction.duration", aggregation=ms),
        View(instrument_name="chat_shell.time_to_first_token", aggregation=ms),
        View(instrument_name="chat_shell.mcp.tool_duration", aggregation=ms),
    ]


def _exemplar_filter() -> ExemplarFilter | None:
    """Off, unless `OTEL_METRICS_EXEMPLAR_FILTER` is set (None lets the SDK read it)."""
    return None if os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER") else AlwaysOffExemplarFilter()


def _install(
    component: str, span_processors: Sequence[SpanProcessor], metric_readers: Sequence[MetricReader]
) -> Telemetry:
    resource = _resource(component)
    tracer_provider = TracerProvider(resource=resource)
    for name in _exporters("traces"):
        tracer_provider.add_span_processor(BatchSpanProcessor(_span_exporter(name)))
    for processor in span_processors:
        tracer_provider.add_span_processor(processor)
    registry = CollectorRegistry(auto_describe=True)
    readers: list[MetricReader] = [
        PrometheusMetricReader(registry=registry),
        *(_metric_reader(name) for name in _exporters("metrics")),
        *metric_readers,
    ]
    meter_provider = MeterProvider(
        resource=resource, metric_readers=readers, views=_views(), exemplar_filter=_exemplar_filter()
    )
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider, meter_provider, registry)
