"""The local model in the service: started when no provider is configured, pointed at by the
default model profile, waited for before each turn (a restart after a crash included), stopped
with the service."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from backend.local_model.installer import server_installed
from backend.local_model.model_file import INSTALL_FIX, resolve_model_file
from backend.local_model.supervisor import LocalModelError, LocalModelServer, ServerOptions
from backend.settings import Settings
from chat_shell.contracts import TurnEvent, TurnRequest, TurnRuntime
from chat_shell.providers.profiles import LOCAL_MODEL_NAME, resolve_profile

log = logging.getLogger(__name__)


def local_model_wanted(settings: Settings) -> bool:
    """SPEC 8: the local model runs when no provider is configured, unless switched off. In
    service mode the chat_shell service calls the model, so the backend starts none."""
    return (
        settings.local_model == "auto"
        and not settings.uses_remote_provider
        and settings.runtime_mode == "package"
    )


def _model_name(settings: Settings) -> str:
    return settings.model or LOCAL_MODEL_NAME


def server_options(settings: Settings) -> ServerOptions:
    """Verified before anything starts: a missing or damaged model file is a startup error."""
    if not server_installed():
        raise LocalModelError(
            f"The local model server (llama-cpp-python) is not installed: {INSTALL_FIX}, or set "
            "OPENAI_BASE_URL to use a provider instead."
        )
    # The runtime's own profile resolution, so the server's window is the one the guard budgets.
    window = resolve_profile(
        _model_name(settings), context_window=settings.context_window, overrides=settings.profile_overrides
    ).context_window
    return ServerOptions(
        model_file=resolve_model_file(settings.local_model_file),
        context_window=window,
        preferred_port=settings.local_model_port,
        log_path=settings.data_dir / "local-model.log",
    )


def with_local_provider(settings: Settings, server: LocalModelServer) -> Settings:
    """The settings the runtime is built from: the local server as the OpenAI-compatible provider."""
    return settings.model_copy(update={"openai_base_url": server.base_url, "model": _model_name(settings)})


@asynccontextmanager
async def running_local_model(settings: Settings) -> AsyncIterator[LocalModelServer]:
    server = LocalModelServer(server_options(settings))
    try:
        await server.start()
        yield server
    finally:
        await server.stop()


class LocalModelRuntime:
    """A `TurnRuntime` that waits for the local server before each turn, so the turn after a
    crash runs on the restarted server. A server that cannot come back leaves the turn to fail
    with the provider's error code."""

    def __init__(self, inner: TurnRuntime, server: LocalModelServer) -> None:
        self.inner = inner
        self.server = server

    async def run(
        self, request: TurnRequest, cancel: asyncio.Event | None = None
    ) -> AsyncIterator[TurnEvent]:
        try:
            await self.server.ready()
        except (LocalModelError, TimeoutError) as exc:
            log.error("local model unavailable for turn %s: %s", request.turn_id, exc)
        async for event in self.inner.run(request, cancel):
            yield event
