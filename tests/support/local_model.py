"""The embedded local model for tests: the real one, and stand-ins for its server.

- `require_local_model`: skip (fail on CI) when `scripts/test.sh` has not installed a model;
- `local_settings`: settings as a fresh install has them (no provider, the local model on);
  `smollm2_settings` the same with SmolLM2, the fast catalog model, for a test that needs it;
- `local_model_ready`: the app's local model once its start has finished;
- `serving`: a catalog model on its own supervised server, without the service;
- stand-in servers, at the provider boundary: `python -m tests.support.local_model --fault F
  <llama-server options>` takes the options the supervisor passes to llama.cpp's server and
  answers like it (`/health`, then the scripted provider's `/v1/chat/completions`), with a
  fault: a segfault on the first request, never becoming ready, or a crash on every third
  request; with `--ready-when PATH` it is loading until that file exists (a slow start the
  test ends). `standin_command` is the value of CHAT_SHELL_LOCAL_MODEL_SERVER.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import signal
import struct
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from backend.local_model.catalog import CATALOG, LocalModel
from backend.local_model.launch import DEFAULT_COMMAND, ServerOptions
from backend.local_model.model_file import catalog_path, default_cache_dir, is_verified
from backend.local_model.supervisor import LocalModelServer
from backend.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ("none", "segfault-first", "never-ready", "crash-every-third")


def require_local_model(name: str = "smollm2-135m") -> LocalModel:
    """`scripts/test.sh` installs both catalog models (`chat-shell local-model install`)."""
    model = CATALOG[name]
    if is_verified(model, catalog_path(model, default_cache_dir())):
        return model
    reason = (
        f"the local model {name} is not installed: run "
        f"`CHAT_SHELL_LOCAL_MODEL={name} chat-shell local-model install`"
    )
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(reason)
    pytest.skip(reason)


def local_settings(make_settings: Callable[..., Settings], database_url: str, **overrides: Any) -> Settings:
    """Settings with no provider configured, so the service starts the local model."""
    values: dict[str, Any] = {"openai_base_url": None, "openai_api_key": None, "local_model": "auto"}
    values.update(overrides)
    return make_settings(database_url, **values)


def smollm2_settings(make_settings: Callable[..., Settings], database_url: str, **overrides: Any) -> Settings:
    """`local_settings` with SmolLM2, once `require_local_model` has found it installed."""
    require_local_model("smollm2-135m")
    return local_settings(make_settings, database_url, local_model="smollm2-135m", **overrides)


async def local_model_ready(app: FastAPI) -> LocalModelServer:
    server: LocalModelServer = app.state.local_model
    status = await asyncio.wait_for(server.settled(), 300)
    assert status.state == "ready", status
    return server


@asynccontextmanager
async def serving(
    model: LocalModel,
    log_path: Path,
    *,
    command: tuple[str, ...] = DEFAULT_COMMAND,
    startup_timeout_seconds: float = 120.0,
) -> AsyncIterator[LocalModelServer]:
    """`model` on its supervised server (ready, or the block is not entered), stopped after."""
    server = LocalModelServer(
        ServerOptions(
            model_file=catalog_path(model, default_cache_dir()),
            model_id=model.profile,
            log_path=log_path,
            command=command,
            startup_timeout_seconds=startup_timeout_seconds,
        )
    )
    server.start()
    try:
        status = await server.settled()
        assert status.state == "ready", (status, server.log_tail())
        yield server
    finally:
        await server.stop()


def standin_command(fault: str = "none", *, ready_when: Path | None = None) -> str:
    command = [
        "env",
        f"PYTHONPATH={ROOT}",
        sys.executable,
        "-m",
        "tests.support.local_model",
        "--fault",
        fault,
    ]
    return shlex.join([*command, *(["--ready-when", str(ready_when)] if ready_when else [])])


def write_gguf(path: Path, *, name: str = "stand-in", architecture: str = "llama") -> Path:
    """A GGUF file with metadata and no tensors: enough for the checks, not for llama.cpp."""

    def string(text: str) -> bytes:
        data = text.encode()
        return struct.pack("<Q", len(data)) + data

    entries = [("general.architecture", architecture), ("general.name", name)]
    body = b"".join(string(key) + struct.pack("<I", 8) + string(value) for key, value in entries)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + body)
    return path


async def new_conversation(client: httpx.AsyncClient) -> int:
    response = await client.post("/api/conversations", json={"title": "local"})
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


async def send(client: httpx.AsyncClient, cid: int, content: str, *, wait: bool = True) -> dict[str, Any]:
    response = await client.post(
        f"/api/conversations/{cid}/messages",
        json={"content": content},
        params={"wait": "true"} if wait else {},
        timeout=300,
    )
    assert response.status_code in (200, 202), response.text
    return response.json()


def _standin_app(fault: str, ready_when: Path | None) -> Any:
    from fastapi.responses import JSONResponse

    from tests.support.scripted_provider import ScriptedProvider

    provider = ScriptedProvider()
    answered = 0

    def loaded() -> bool:
        return fault != "never-ready" and (ready_when is None or ready_when.exists())

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal answered
        if scope["type"] == "http" and scope["path"] == "/health":
            ready = loaded()
            body = {"status": "ok"} if ready else {"error": {"code": 503, "message": "Loading model"}}
            await JSONResponse(body, status_code=200 if ready else 503)(scope, receive, send)
            return
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            answered += 1
            if (fault == "segfault-first" and answered == 1) or (
                fault == "crash-every-third" and answered % 3 == 0
            ):
                os.kill(os.getpid(), signal.SIGSEGV)
        await provider.app(scope, receive, send)

    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT / ".cache" / "tiktoken"))
    parser = argparse.ArgumentParser(description="A stand-in for llama.cpp's server, with a fault.")
    parser.add_argument("--fault", choices=FAULTS, default="none")
    for option in ("--model", "--alias", "--ctx-size", "--threads", "--threads-batch"):
        parser.add_argument(option)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ready-when", type=Path, help="loading until this file exists")
    args = parser.parse_args(argv)
    uvicorn.run(
        _standin_app(args.fault, args.ready_when), host=args.host, port=args.port, log_level="warning"
    )


if __name__ == "__main__":
    main()
