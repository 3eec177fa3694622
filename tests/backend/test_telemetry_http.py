"""Operators' telemetry over HTTP: `/metrics` after scripted turns, its protection, and logs.

The process's OpenTelemetry SDK is the backend's own setup with in-memory exporters attached
(the `telemetry` fixture); counters are cumulative for the process, so tests compare scrapes.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from opentelemetry import trace
from prometheus_client.parser import text_string_to_metric_families

from backend.app import create_app
from backend.logs import log_handler
from backend.runtime_factory import create_service_app
from backend.secret_policy import new_secret
from backend.settings import Settings
from chat_shell.providers.openai import ProviderConfig
from chat_shell.runtime import ChatShell, RuntimeConfig
from tests.support.api import new_operator, new_user, signed_in
from tests.support.capabilities import SERVICE_TOKEN
from tests.support.mcp_servers import stdio_server
from tests.support.scripted_provider import ScriptedProvider, text, tool_call
from tests.support.servers import serve
from tests.support.sse import read_stream
from tests.support.telemetry import EMERGENCY_WINDOW, Recorded, guard_without_summary, over_trigger_history
from tests.support.texts import log_text
from tests.support.turns import collect, make_request

GRAFANA_DASHBOARD = (
    Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards" / "chat-shell.json"
)

SCRAPE_TOKEN = new_secret()
SECRET = "my locker code is 5-5-2-8"
# The only labels chat_shell's own series may carry: bounded sets, never ids.
ALLOWED_LABELS = {"model_profile", "termination_reason", "purpose", "outcome", "strategy", "status", "le"}
ALLOWED_LABELS |= {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}
# MCP tool metrics: the names of servers and tools the operator configured (a bounded set).
ALLOWED_LABELS |= {"mcp_server", "tool"}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
async def metrics_server(
    telemetry: Recorded, sqlite_url: str, chat_settings: Callable[..., Settings]
) -> AsyncIterator[str]:
    settings = chat_settings(
        sqlite_url,
        telemetry_enabled=True,
        metrics_token=SCRAPE_TOKEN,
        context_window=16_384,
        max_output_tokens=2_048,
        sse_ping_seconds=0.5,
    )
    async with serve(create_app(settings)) as base_url:
        yield base_url


async def _scrape(base_url: str) -> tuple[Samples, set[str]]:
    async with httpx.AsyncClient(base_url=base_url) as client:
        response = await client.get("/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    label_keys: set[str] = set()
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name.startswith("chat_shell_"):
                label_keys |= set(sample.labels)
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples, label_keys


def _sum(samples: Samples, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(value for (n, found), value in samples.items() if n == name and wanted <= found)


async def _send(client: httpx.AsyncClient, cid: int, content: str) -> dict:
    response = await client.post(
        f"/api/conversations/{cid}/messages", json={"content": content}, params={"wait": "true"}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def _scripted_turns(base_url: str, provider: ScriptedProvider, username: str) -> None:
    """A completed turn with a tool call, a refused one, a provider overflow, and a resumed stream."""
    client = await new_user(base_url, username)
    try:
        cid = (await client.post("/api/conversations", json={"title": "t"})).json()["id"]
        provider.script(tool_call("generate_report", {"rows": 2, "seed": 1}), text("All good."))
        await _send(client, cid, "A report, please.")
        refused = await _send(client, cid, log_text(80_000))
        assert refused["assistant_message"]["status"] == "failed"
        # A conversation of its own: the refused message stays in the first one's history.
        other = (await client.post("/api/conversations", json={"title": "u"})).json()["id"]
        provider.context_window = 10
        try:
            overflowed = await _send(client, other, "Short question.")
        finally:
            provider.context_window = None
        # It overflowed, was compacted and retried once, overflowed again: a clear refusal.
        assert overflowed["assistant_message"]["result"]["error"]["code"] == "context_refused"
        # A reader resumes the finished turn after its first event, and closes.
        resumed = await read_stream(client, other, last_event_id=f"{overflowed['turn_id']}:1")
        assert resumed.terminal is not None
    finally:
        await client.aclose()


async def _emergency_truncation(provider: ScriptedProvider) -> None:
    """A turn whose history is over the trigger with no summary stage: the emergency stage
    rewrites tool outputs (chat_shell in this process records to the same metrics)."""
    shell = ChatShell(
        RuntimeConfig(
            provider=ProviderConfig(base_url=provider.base_url, api_key="k", max_retries=0),
            model="gpt-4o",
            **EMERGENCY_WINDOW,
        ),
        guard_factory=guard_without_summary,
    )
    provider.script(text("Two failures."))
    events = await collect(
        shell, make_request(9_001, "Summarize the errors.", history=over_trigger_history())
    )
    assert any(e.type == "context.compaction" for e in events)


async def _mcp_calls(
    database_url: str, settings: Callable[..., Settings], provider: ScriptedProvider, tmp_path: Path
) -> None:
    """A turn whose MCP calls end ok, in an error and in a timeout, on a backend of this process
    with an MCP server (its metrics go to the same exporter)."""
    servers_file = tmp_path / "mcp.json"
    config = stdio_server(call_timeout_seconds=1).model_dump()
    servers_file.write_text(json.dumps({"servers": {"ops": config}}))
    app = create_app(settings(database_url, telemetry_enabled=True, mcp_servers=servers_file))
    async with serve(app) as base_url, signed_in(base_url, "mcp") as client:
        cid = (await client.post("/api/conversations", json={"title": "m"})).json()["id"]
        provider.script(
            tool_call("ops_echo", {"text": "x"}),
            tool_call("ops_explode", {}),
            tool_call("ops_hang", {}),
            text("ok"),
        )
        await _send(client, cid, "Use the tools.")


async def test_every_metric_a_grafana_panel_queries_appears_in_a_scrape(
    metrics_server: str,
    scripted_provider: ScriptedProvider,
    sqlite_url: str,
    chat_settings: Callable[..., Settings],
    tmp_path: Path,
) -> None:
    dashboard = json.loads(GRAFANA_DASHBOARD.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"chat_shell_[a-z_]+", target["expr"])
    }
    assert len(queried) >= 12
    await _scripted_turns(metrics_server, scripted_provider, "grafana")
    await _emergency_truncation(scripted_provider)
    await _mcp_calls(sqlite_url, chat_settings, scripted_provider, tmp_path)
    samples, _ = await _scrape(metrics_server)
    scraped = {name for name, _ in samples}
    assert queried <= scraped, f"queried by Grafana but not exported: {sorted(queried - scraped)}"


async def test_metrics_need_the_scraper_token_or_an_operator(metrics_server: str, sqlite_url: str) -> None:
    async with httpx.AsyncClient(base_url=metrics_server) as anonymous:
        assert (await anonymous.get("/metrics")).status_code == 401
        wrong = await anonymous.get("/metrics", headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401
        scraper = await anonymous.get("/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
        assert scraper.status_code == 200 and "target_info" in scraper.text
    user = await new_user(metrics_server, "plain")
    operator = await new_operator(metrics_server, sqlite_url, "watcher")
    try:
        denied = await user.get("/metrics")
        assert denied.status_code == 403 and denied.json()["code"] == "operator_only"
        assert (await operator.get("/metrics")).status_code == 200
    finally:
        await user.aclose()
        await operator.aclose()


async def test_a_scrape_after_scripted_turns_shows_their_outcomes_tokens_and_streams(
    metrics_server: str, scripted_provider: ScriptedProvider
) -> None:
    before, _ = await _scrape(metrics_server)
    await _scripted_turns(metrics_server, scripted_provider, "scripted")
    after, label_keys = await _scrape(metrics_server)

    def grew(name: str, **labels: str) -> float:
        return _sum(after, name, **labels) - _sum(before, name, **labels)

    assert grew("chat_shell_turns_total", termination_reason="normal_completion") == 1
    # The guard's refusal and the provider's overflow that stayed after the retry.
    assert grew("chat_shell_turns_total", termination_reason="context_refused") == 2
    assert grew("chat_shell_refusals_total") == 2
    assert grew("chat_shell_provider_overflow_errors_total") == 2
    assert grew("chat_shell_model_calls_total", outcome="ok", purpose="answer") == 2
    assert grew("chat_shell_model_calls_total", outcome="error") >= 1
    assert grew("chat_shell_model_input_tokens_total") > 0
    assert grew("chat_shell_model_output_tokens_total") > 0
    # One per turn that left a request (the completed, the refused and the overflowed one).
    assert grew("chat_shell_context_utilization_count") == 3
    assert grew("chat_shell_time_to_first_token_milliseconds_count") == 1
    assert grew("chat_shell_stream_resumes_total") == 1
    assert _sum(after, "chat_shell_streams_active") == 0  # the stream closed again
    assert label_keys <= ALLOWED_LABELS


async def test_with_telemetry_disabled_there_is_nothing_to_scrape(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(sqlite_url, telemetry_enabled=False, metrics_token=SCRAPE_TOKEN)
    async with serve(create_app(settings)) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        response = await client.get("/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
    assert response.status_code == 404 and response.json()["code"] == "telemetry_disabled"


async def test_turn_logs_carry_the_grep_keys_and_no_message_content_at_info(
    metrics_server: str, scripted_provider: ScriptedProvider, caplog: pytest.LogCaptureFixture
) -> None:
    client = await new_user(metrics_server, "private")
    caplog.set_level(logging.INFO)
    try:
        cid = (await client.post("/api/conversations", json={"title": "t"})).json()["id"]
        scripted_provider.script(
            tool_call("generate_report", {"rows": 2, "seed": 1, "title": SECRET}), text(f"Noted: {SECRET}")
        )
        await _send(client, cid, f"Remember this: {SECRET}")
    finally:
        await client.aclose()
    lines = [record.getMessage() for record in caplog.records if record.levelno >= logging.INFO]
    assert any(line.startswith("[TurnMetrics] ") for line in lines)
    assert any(line.startswith("[Persistence] ") for line in lines)
    assert not [line for line in lines if SECRET in line or "5-5-2-8" in line]


def _logger_into(buffer: io.StringIO, name: str, *, json_lines: bool) -> logging.Logger:
    """A logger of its own that writes through the service's log handler into `buffer`."""
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.addHandler(log_handler(json_lines=json_lines, stream=buffer))
    logger.setLevel(logging.INFO)
    return logger


def test_json_log_lines_carry_the_trace_and_span_of_the_work(telemetry: Recorded) -> None:
    buffer = io.StringIO()
    logger = _logger_into(buffer, "tests.json_lines", json_lines=True)
    with trace.get_tracer("tests").start_as_current_span("work") as span:
        logger.info("[TurnMetrics] turn=%s reason=%s", 7, "normal_completion", extra={"turn_id": 7})
    logger.info("outside any span")
    inside, outside = (json.loads(line) for line in buffer.getvalue().splitlines())
    context = span.get_span_context()
    assert inside["message"] == "[TurnMetrics] turn=7 reason=normal_completion"
    assert inside["trace_id"] == format(context.trace_id, "032x")
    assert inside["span_id"] == format(context.span_id, "016x")
    assert inside["level"] == "INFO" and inside["turn_id"] == 7
    assert outside["trace_id"] == "" and outside["message"] == "outside any span"


def test_text_log_lines_carry_the_trace_id(telemetry: Recorded) -> None:
    buffer = io.StringIO()
    logger = _logger_into(buffer, "tests.text_lines", json_lines=False)
    with trace.get_tracer("tests").start_as_current_span("work") as span:
        logger.info("[Persistence] turn=1")
    line = buffer.getvalue()
    assert f"trace_id={format(span.get_span_context().trace_id, '032x')}" in line
    assert line.rstrip().endswith("[Persistence] turn=1")


async def test_the_chat_shell_service_serves_its_metrics_to_the_scraper_token(
    telemetry: Recorded,
    make_settings: Callable[..., Settings],
    sqlite_url: str,
    scripted_provider: ScriptedProvider,
) -> None:
    settings = make_settings(
        sqlite_url,
        openai_base_url=scripted_provider.base_url,
        runtime_mode="service",
        service_token=SERVICE_TOKEN,
        telemetry_enabled=True,
        metrics_token=SCRAPE_TOKEN,
    )
    async with (
        serve(create_service_app(settings)) as base_url,
        httpx.AsyncClient(base_url=base_url) as client,
    ):
        assert (await client.get("/metrics")).status_code == 401
        for token in (SCRAPE_TOKEN, SERVICE_TOKEN):
            response = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
            assert response.status_code == 200 and "target_info" in response.text
