"""`GET /metrics`: this process's OpenTelemetry metrics as Prometheus text (SPEC 5.8).

A scraper authenticates with `Authorization: Bearer <CHAT_SHELL_METRICS_TOKEN>`; an operator's
own session or API token works too. Nothing else gets in: the default (no token configured)
is operators only, never an open endpoint.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from backend.api.deps import app_context, current_principal
from backend.services.errors import Forbidden, NotFound
from backend.telemetry import Telemetry

router = APIRouter(tags=["operators"])


def _scraper_token_matches(request: Request, token: str | None) -> bool:
    if not token:
        return False
    sent = request.headers.get("authorization", "")
    return hmac.compare_digest(sent.encode(), f"Bearer {token}".encode())


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
async def prometheus_metrics(request: Request) -> Response:
    """Prometheus text exposition of turns, model calls, tokens, compactions, streams, ..."""
    settings = app_context(request).settings
    if not _scraper_token_matches(request, settings.metrics_token):
        principal = await current_principal(request)
        if not principal.user.is_operator:
            raise Forbidden("operator_only", "metrics are for operators and the configured scraper")
    telemetry: Telemetry | None = request.app.state.telemetry
    if telemetry is None:
        raise NotFound(
            code="telemetry_disabled", message="telemetry is disabled (CHAT_SHELL_TELEMETRY_ENABLED)"
        )
    body = await run_in_threadpool(generate_latest, telemetry.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def add_service_metrics(app: FastAPI, telemetry: Telemetry, tokens: Sequence[str | None]) -> None:
    """`GET /metrics` on the chat_shell service (service mode), for the scraper's token or the
    service token; the turn metrics are recorded where chat_shell runs."""
    accepted = [token for token in tokens if token]

    async def service_metrics(request: Request) -> Response:
        if not any(_scraper_token_matches(request, token) for token in accepted):
            return Response(status_code=401)
        body = await run_in_threadpool(generate_latest, telemetry.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    app.add_api_route("/metrics", service_metrics, methods=["GET"], include_in_schema=False)
