"""Process logging (SPEC 5.3, 5.8): one line per record, plain text or JSON, with trace ids.

Every record carries the current OpenTelemetry `trace_id`/`span_id` (empty outside a span), so
a log line leads to its trace. The grep keys stay in the message in both formats
(`[SummaryCompact]`, `[Persistence]`, `[TurnMetrics]`). Nothing in this codebase logs message
content at INFO or above; content belongs to the user, not to the logs.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, TextIO

from opentelemetry import trace

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [trace_id=%(trace_id)s span_id=%(span_id)s] %(message)s"
# Attributes every LogRecord has; anything else on a record came from `extra=` and is kept.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "trace_id", "span_id"}


class TraceContext(logging.Filter):
    """Adds the current span's ids to the record (never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        else:
            record.trace_id = record.span_id = ""
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "trace_id": getattr(record, "trace_id", ""),
            "span_id": getattr(record, "span_id", ""),
        }
        document.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str, ensure_ascii=False)


def log_handler(*, json_lines: bool, stream: TextIO | None = None) -> logging.Handler:
    handler = logging.StreamHandler(stream)
    handler.addFilter(TraceContext())
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
    return handler


def configure_logging(level: str, *, json_lines: bool) -> None:
    """The root logger writes through one handler; uvicorn's loggers propagate to it."""
    root = logging.getLogger()
    root.handlers[:] = [log_handler(json_lines=json_lines)]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
