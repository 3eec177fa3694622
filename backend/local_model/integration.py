"""The local model in the service: chosen by the settings, started in the background when no
provider is configured, pointed at by the runtime's provider URL, consulted before a message is
accepted, waited for before each turn, stopped with the service."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.local_model.catalog import LocalModel, catalog_model
from backend.local_model.installer import InstallReport, Progress, ensure_model
from backend.local_model.launch import DEFAULT_COMMAND, ServerOptions
from backend.local_model.model_file import (
    ModelFile,
    catalog_path,
    check_operator_file,
    default_cache_dir,
    is_verified,
    resolve_model_file,
)
from backend.local_model.status import LocalModelError
from backend.local_model.supervisor import LocalModelServer
from backend.services.errors import Unavailable
from backend.settings import Settings
from chat_shell.contracts import (
    McpServerInfo,
    TitleRequest,
    TurnEvent,
    TurnFailed,
    TurnRequest,
    TurnResult,
    TurnRuntime,
)
from chat_shell.providers.profiles import resolve_profile

if TYPE_CHECKING:
    from backend.services.model_catalog import CatalogModel

LOCAL_MODEL_FAILED = "local_model_failed"


def local_model_wanted(settings: Settings) -> bool:
    """SPEC 8: the local model runs when no provider is configured, unless switched off; next
    to a models file (`CHAT_SHELL_MODELS`) it is one more entry when it is installed. In
    service mode the chat_shell service calls the model, so the backend starts none."""
    if settings.local_model == "off" or settings.runtime_mode != "package":
        return False
    if settings.models is not None:
        return local_model_installed(settings)
    return not settings.uses_remote_provider


def local_model_installed(settings: Settings) -> bool:
    """The model file is in place and verified (nothing would be fetched to serve it)."""
    if settings.local_model_file is not None:
        return settings.local_model_file.is_file()
    model = chosen_model(settings)
    return is_verified(model, catalog_path(model, model_cache(settings)))


def chosen_model(settings: Settings) -> LocalModel:
    return catalog_model(settings.local_model)


def model_cache(settings: Settings) -> Path:
    return settings.local_model_cache or default_cache_dir()


def model_id(settings: Settings) -> str:
    """The id the server answers to and the runtime's profile: `CHAT_SHELL_MODEL` when set."""
    return settings.model or chosen_model(settings).profile


def install_model(settings: Settings, progress: Progress, *, force: bool = False) -> InstallReport | None:
    """Fetch and verify the chosen catalog model when missing; the operator's own file is only
    checked (so a bad one stops the command before anything starts)."""
    if settings.local_model_file is not None:
        check_operator_file(settings.local_model_file)
        return None
    return ensure_model(chosen_model(settings), model_cache(settings), progress, force=force)


def model_file(settings: Settings) -> ModelFile:
    """The checked file to serve; a missing or damaged one is an error naming the fix."""
    return resolve_model_file(
        chosen_model(settings), model_cache(settings), settings.local_model_file, model_id(settings)
    )


def _server_program(settings: Settings) -> tuple[str, ...]:
    if settings.local_model_server:
        return tuple(shlex.split(settings.local_model_server))
    if find_spec("xllamacpp") is None:
        raise LocalModelError(
            "The local model server (the xllamacpp package) is not installed in this environment: "
            "run `bash scripts/setup.sh` (`make run` does it), or set OPENAI_BASE_URL to use a provider."
        )
    return DEFAULT_COMMAND


def server_options(settings: Settings, served: ModelFile, **fields: Any) -> ServerOptions:
    # The runtime's own profile resolution, so the server's window is the one the guard budgets.
    window = resolve_profile(
        served.model_id, context_window=settings.context_window, overrides=settings.profile_overrides
    ).context_window
    values: dict[str, Any] = {
        "model_file": served.path,
        "model_id": served.model_id,
        "context_window": window,
        "preferred_port": settings.local_model_port,
        "log_path": settings.data_dir / "local-model.log",
        "command": _server_program(settings),
        "startup_timeout_seconds": settings.local_model_startup_timeout_seconds,
    }
    return ServerOptions(**{**values, **fields})


def local_entry(settings: Settings, server: LocalModelServer) -> CatalogModel:
    """The local server as a catalog entry (an OpenAI-compatible endpoint without a key)."""
    # Imported here: `serve` imports this module to start the model before the provider
    # modules (langchain-openai and its SDK take seconds to import) load.
    from backend.services.model_catalog import NO_KEY, CatalogModel

    model = server.options.model_id
    label = model if settings.local_model_file is not None else chosen_model(settings).title
    return CatalogModel(
        id=model, label=f"{label} (local)", base_url=server.base_url, api_key=NO_KEY, name=model
    )


@asynccontextmanager
async def running_local_model(settings: Settings) -> AsyncIterator[LocalModelServer]:
    """The server, starting in the background: the service answers (the page says the model is
    starting) while it loads and proves it can decode."""
    server = LocalModelServer(server_options(settings, model_file(settings)))
    try:
        server.start()
        yield server
    finally:
        await server.stop()


def require_accepting(server: LocalModelServer | None, model: str) -> None:
    """Before a message to `model` is stored: one the local model cannot answer now is refused
    with the model's state (503 `local_model_starting` or `local_model_failed`), not left to fail."""
    if server is None or model != server.options.model_id or server.status.state == "ready":
        return
    status = server.status
    raise Unavailable(status.code, status.message, retry_after=2 if status.state != "failed" else None)


def _failed(message: str, partial: str = "") -> TurnFailed:
    return TurnFailed(
        code=LOCAL_MODEL_FAILED,
        message=message,
        partial=partial,
        result=TurnResult(value=partial, termination_reason="provider_error"),
    )


class LocalModelRuntime:
    """A `TurnRuntime` that waits for the local server before each turn (so the turn after a
    crash runs on the restarted server) and reports a turn the server's crash broke, or one it
    cannot run, as `local_model_failed` with the reason and the log path."""

    def __init__(self, inner: TurnRuntime, server: LocalModelServer) -> None:
        self.inner = inner
        self.server = server

    async def mcp_servers(self) -> list[McpServerInfo]:
        return await self.inner.mcp_servers()

    async def decide(self, turn_id: int, call_id: str, allow: bool) -> bool:
        return await self.inner.decide(turn_id, call_id, allow)

    async def write_title(self, request: TitleRequest) -> str | None:
        if request.model == self.server.options.model_id and self.server.status.state != "ready":
            return None  # the first line stays; a title never waits for the server to start
        return await self.inner.write_title(request)

    def _crash_message(self) -> str:
        status = self.server.status
        if status.state == "failed":
            return status.message
        return (
            f"The local model ({status.model_id}) crashed during this reply ({self.server.last_exit}); "
            f"it is being restarted, so send the message again once it is ready. Its log is "
            f"{status.log_path}."
        )

    async def run(
        self, request: TurnRequest, cancel: asyncio.Event | None = None
    ) -> AsyncGenerator[TurnEvent, None]:
        if request.model != self.server.options.model_id:
            async for event in self.inner.run(request, cancel):
                yield event
            return
        try:
            await self.server.ready()
        except (LocalModelError, TimeoutError):
            yield _failed(self.server.status.message)
            return
        exits = self.server.exits
        async for event in self.inner.run(request, cancel):
            if (
                isinstance(event, TurnFailed)
                and event.code.startswith("provider_")
                and await self.server.exited_since(exits)
            ):
                yield event.model_copy(update={"code": LOCAL_MODEL_FAILED, "message": self._crash_message()})
                continue
            yield event
