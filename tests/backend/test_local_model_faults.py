"""Faults of the embedded local model, each with the real llama.cpp server: a taken port, a
server killed mid-turn, a missing or damaged model file, a disk too full to build on."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from backend.app import create_app
from backend.local_model.model_file import ModelFileError
from backend.local_model.supervisor import LocalModelError
from backend.settings import Settings
from tests.support.api import new_user
from tests.support.local_model import local_settings, new_conversation, require_local_model, send
from tests.support.servers import serve
from tests.support.sse import read_stream

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something else is listening on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.local_model
async def test_a_taken_port_is_replaced_by_a_free_one(
    sqlite_url: str, make_settings: Callable[..., Settings], taken_port: int
) -> None:
    require_local_model()
    app = create_app(
        local_settings(make_settings, sqlite_url, local_model_port=taken_port, max_output_tokens=16)
    )
    async with serve(app) as base_url:
        assert app.state.local_model.port != taken_port
        client = await new_user(base_url, "porter")
        reply = await send(client, await new_conversation(client), "Say hi.")
        await client.aclose()
    assert reply["assistant_message"]["status"] == "completed"


@pytest.mark.local_model
async def test_a_server_killed_mid_turn_fails_that_turn_and_serves_the_next(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    require_local_model()
    app = create_app(local_settings(make_settings, sqlite_url, max_output_tokens=400))
    async with serve(app) as base_url:
        server = app.state.local_model
        first_pid = server.pid
        client = await new_user(base_url, "crash")
        cid = await new_conversation(client)
        started = await send(client, cid, "Write a long story about a lighthouse keeper.", wait=False)
        # Kill the server once the reply is streaming.
        head = await read_stream(client, cid, turn_id=started["turn_id"], stop_after=3)
        assert head.terminal is None, head.events
        os.kill(first_pid, signal.SIGKILL)
        stream = await read_stream(client, cid, turn_id=started["turn_id"])

        assert stream.terminal is not None and stream.terminal.event == "turn.failed", stream.events
        assert stream.terminal.data["code"] == "provider_unavailable"
        after = await send(client, cid, "Say hi.")
        await client.aclose()
    assert after["assistant_message"]["status"] == "completed"
    assert after["assistant_message"]["result"]["value"].strip()
    assert server.pid != first_pid and server.restart_count == 1


async def test_a_missing_model_file_stops_startup_naming_the_fix(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    require_local_model()
    missing = tmp_path / "nowhere.gguf"
    app = create_app(local_settings(make_settings, sqlite_url, local_model_file=missing))
    with pytest.raises(ModelFileError, match=r"does not exist: set CHAT_SHELL_LOCAL_MODEL_FILE"):
        async with app.router.lifespan_context(app):
            pass


async def test_a_file_that_is_not_a_model_stops_startup_naming_the_fix(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    require_local_model()
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"<html>404 not found</html>")
    app = create_app(local_settings(make_settings, sqlite_url, local_model_file=bogus))
    with pytest.raises(ModelFileError, match=r"not a GGUF model .*CHAT_SHELL_LOCAL_MODEL_FILE"):
        async with app.router.lifespan_context(app):
            pass


@pytest.mark.local_model
async def test_a_truncated_model_makes_the_server_fail_at_startup_with_the_fix(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    require_local_model()
    truncated = tmp_path / "model.gguf"
    truncated.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    app = create_app(local_settings(make_settings, sqlite_url, local_model_file=truncated))
    with pytest.raises(LocalModelError, match=r"exited during startup .*local-model install --force"):
        async with app.router.lifespan_context(app):
            pass


def test_the_serve_command_reports_a_damaged_model_file_in_one_line(tmp_path: Path) -> None:
    require_local_model()
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a model")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")},
        "CHAT_SHELL_DATA_DIR": str(tmp_path / "data"),
        "CHAT_SHELL_LOCAL_MODEL": "auto",
        "CHAT_SHELL_LOCAL_MODEL_FILE": str(bogus),
        "PYTHONPATH": str(ROOT),
    }
    result = subprocess.run(
        [sys.executable, "-m", "backend.cli", "serve", "--port", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: The local model file {bogus} is not a GGUF model (corrupt or wrong file): set "
        "CHAT_SHELL_LOCAL_MODEL_FILE to a GGUF model file, or unset it to use the packaged SmolLM2."
    )
