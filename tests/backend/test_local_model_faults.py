"""Faults of the embedded local model as a user and an operator see them: on the chat page, in
/readyz, in the send's answer, in the turn's error and in the log.

Stand-in servers (tests/support/local_model.py) play a server that segfaults on its first
request, one that never becomes ready, one that crashes on every third request and one that
starts slowly; the real llama.cpp server plays a server killed mid-turn and one whose preferred
port is taken. Damaged model files and taken ports of the commands stop with one clear line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.app import create_app
from backend.local_model.catalog import CATALOG
from backend.local_model.integration import install_model
from backend.local_model.model_file import ModelFileError, catalog_path, default_cache_dir
from backend.settings import Settings
from tests.support.api import new_user
from tests.support.local_model import (
    ROOT,
    local_model_ready,
    local_settings,
    new_conversation,
    require_local_model,
    send,
    smollm2_settings,
    standin_command,
    write_gguf,
)
from tests.support.servers import free_port, serve
from tests.support.sse import read_stream


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something else is listening on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def standin_settings(
    make_settings: Callable[..., Settings],
    sqlite_url: str,
    tmp_path: Path,
    fault: str,
    ready_when: Path | None = None,
    **overrides: Any,
) -> Settings:
    return local_settings(
        make_settings,
        sqlite_url,
        local_model_file=write_gguf(tmp_path / "stand-in.gguf"),
        local_model_server=standin_command(fault, ready_when=ready_when),
        **overrides,
    )


async def _readyz(base_url: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base_url) as client:
        return await client.get("/readyz")


async def _boot_state(client: httpx.AsyncClient) -> str:
    """The local model's state as the chat page gets it (the boot data of `/`)."""
    page = (await client.get("/")).text
    assert '"local_model": {' in page
    return page.split('"state": "', 1)[1].split('"', 1)[0]


async def test_a_server_that_segfaults_on_its_first_decode_is_reported_as_failed_everywhere(
    sqlite_url: str,
    make_settings: Callable[..., Settings],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(standin_settings(make_settings, sqlite_url, tmp_path, "segfault-first"))
    async with serve(app) as base_url:
        status = await app.state.local_model.settled()
        client = await new_user(base_url, "crashy")
        cid = await new_conversation(client)
        refused = await client.post(f"/api/conversations/{cid}/messages", json={"content": "hello?"})
        ready = await _readyz(base_url)
        boot = await _boot_state(client)
        stored = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]
        await client.aclose()

    log_path = str(tmp_path / "data" / "local-model.log")
    assert status.state == "failed"
    assert status.reason == "the server crashed on its first decode, killed by signal SIGSEGV"
    assert ready.status_code == 503
    assert ready.json()["local_model"]["state"] == "failed"
    assert ready.json()["local_model"]["log_path"] == log_path
    assert "crashed on its first decode" in ready.json()["reason"]
    assert boot == "failed"
    assert refused.status_code == 503
    assert refused.json()["code"] == "local_model_failed"
    assert log_path in refused.json()["message"]
    assert stored == [], "a message the model cannot answer must not be stored"
    failures = [r for r in caplog.records if r.levelno == logging.ERROR and "local model" in r.getMessage()]
    assert failures and "SIGSEGV" in failures[0].getMessage()


async def test_a_server_that_never_becomes_ready_fails_after_the_startup_timeout(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = standin_settings(
        make_settings, sqlite_url, tmp_path, "never-ready", local_model_startup_timeout_seconds=3
    )
    app = create_app(settings)
    async with serve(app) as base_url:
        starting = (await _readyz(base_url)).json()["local_model"]
        status = await app.state.local_model.settled()
        failed = await _readyz(base_url)

    assert starting["state"] == "starting"
    assert starting["message"].endswith("is starting…")
    assert status.state == "failed" and status.reason == "the server did not become ready within 3 s"
    assert failed.status_code == 503 and failed.json()["local_model"]["code"] == "local_model_failed"
    assert app.state.local_model.pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(app.state.local_model.pid, 0)  # the hanging server was stopped, not left behind


async def test_while_the_model_starts_a_message_is_refused_with_local_model_starting(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    loaded = tmp_path / "loaded"
    app = create_app(standin_settings(make_settings, sqlite_url, tmp_path, "none", ready_when=loaded))
    async with serve(app) as base_url:
        client = await new_user(base_url, "eager")
        cid = await new_conversation(client)
        early = await client.post(f"/api/conversations/{cid}/messages", json={"content": "hi"})
        boot = await _boot_state(client)
        not_ready = await _readyz(base_url)
        loaded.touch()
        await local_model_ready(app)
        ready = await _readyz(base_url)
        reply = await send(client, cid, "hi again")
        await client.aclose()

    assert early.status_code == 503 and early.json()["code"] == "local_model_starting"
    assert early.headers["retry-after"] == "2"
    assert boot == "starting"
    assert not_ready.status_code == 503 and not_ready.json()["local_model"]["state"] == "starting"
    assert ready.status_code == 200 and ready.json()["local_model"]["state"] == "ready"
    assert reply["assistant_message"]["status"] == "completed"
    assert reply["user_message"]["message_id"] == 1, "the refused message was not stored"


async def test_a_server_crashing_every_third_request_fails_those_turns_then_stops_being_restarted(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """Each start's verifying decode is request 1, so every second turn meets a crash; the
    fourth crash within the window exceeds the three restarts allowed."""
    app = create_app(standin_settings(make_settings, sqlite_url, tmp_path, "crash-every-third"))
    outcomes: list[tuple[str, str]] = []
    async with serve(app) as base_url:
        server = await local_model_ready(app)
        client = await new_user(base_url, "flaky")
        cid = await new_conversation(client)
        for turn in range(8):
            reply = await send(client, cid, f"message {turn}")
            error = (reply["assistant_message"]["result"] or {}).get("error") or {}
            outcomes.append((reply["assistant_message"]["status"], error.get("code", "")))
            if turn % 2 == 1:
                await server.settled()
        refused = await client.post(f"/api/conversations/{cid}/messages", json={"content": "still there?"})
        stored = (await client.get(f"/api/conversations/{cid}/messages")).json()["items"]
        crash_error = stored[3]["result"]["error"]
        await client.aclose()

    assert outcomes == [("completed", ""), ("failed", "local_model_failed")] * 4
    assert "crashed during this reply (killed by signal SIGSEGV)" in crash_error["message"]
    assert "cannot be reached" not in crash_error["message"]
    assert server.restart_count == 3
    assert server.status.state == "failed"
    assert server.status.reason == (
        "the server crashed 4 times within 600 s and is not restarted again "
        "(last: the server exited, killed by signal SIGSEGV)"
    )
    assert refused.status_code == 503 and refused.json()["code"] == "local_model_failed"


@pytest.mark.local_model
async def test_a_server_killed_mid_turn_fails_that_turn_clearly_and_serves_the_next(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    settings = smollm2_settings(make_settings, sqlite_url, max_output_tokens=400)
    app = create_app(settings)
    async with serve(app) as base_url:
        server = await local_model_ready(app)
        first_pid = server.pid
        client = await new_user(base_url, "crash")
        cid = await new_conversation(client)
        started = await send(client, cid, "Write a long story about a lighthouse keeper.", wait=False)
        # Kill the server once the reply is streaming.
        head = await read_stream(client, cid, turn_id=started["turn_id"], stop_after=3)
        assert head.terminal is None, head.events
        assert first_pid is not None
        os.kill(first_pid, signal.SIGKILL)
        stream = await read_stream(client, cid, turn_id=started["turn_id"])

        assert stream.terminal is not None and stream.terminal.event == "turn.failed", stream.events
        assert stream.terminal.data["code"] == "local_model_failed"
        assert "killed by signal SIGKILL" in stream.terminal.data["message"]
        await server.settled()
        after = await send(client, cid, "Say hi.")
        await client.aclose()
    assert after["assistant_message"]["status"] == "completed"
    assert after["assistant_message"]["result"]["value"].strip()
    assert server.pid != first_pid and server.restart_count == 1


@pytest.mark.local_model
async def test_a_taken_preferred_port_is_replaced_by_a_free_one(
    sqlite_url: str, make_settings: Callable[..., Settings], taken_port: int
) -> None:
    settings = smollm2_settings(make_settings, sqlite_url, local_model_port=taken_port, max_output_tokens=16)
    app = create_app(settings)
    async with serve(app) as base_url:
        server = await local_model_ready(app)
        client = await new_user(base_url, "porter")
        reply = await send(client, await new_conversation(client), "Say hi.")
        await client.aclose()
    assert server.port != taken_port
    assert reply["assistant_message"]["status"] == "completed"


def _cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **{k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")},
        "CHAT_SHELL_DATA_DIR": str(tmp_path / "data"),
        "CHAT_SHELL_LOCAL_MODEL": "auto",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "backend.cli", *args],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_serve_on_a_taken_port_stops_at_once_in_one_line(tmp_path: Path, taken_port: int) -> None:
    result = _cli(tmp_path, "serve", "--port", str(taken_port))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: Port {taken_port} on 127.0.0.1 is in use by another program: stop it, or choose "
        "another with --port (`PORT=8001 make run`)."
    ]


def test_the_model_server_command_on_a_taken_port_stops_in_one_line(tmp_path: Path, taken_port: int) -> None:
    result = _cli(
        tmp_path,
        *("local-model", "serve", "--port", str(taken_port)),
        CHAT_SHELL_LOCAL_MODEL_FILE=str(write_gguf(tmp_path / "m.gguf")),
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: Port {taken_port} on 127.0.0.1 is in use by another program: stop it, or choose "
        "another with --port."
    )


async def test_a_missing_model_file_stops_startup_naming_the_fix(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere.gguf"
    app = create_app(local_settings(make_settings, sqlite_url, local_model_file=missing))
    with pytest.raises(ModelFileError, match=r"does not exist: set CHAT_SHELL_LOCAL_MODEL_FILE"):
        async with app.router.lifespan_context(app):
            pass


def test_serve_reports_a_file_that_is_not_a_model_in_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"<html>404 not found</html>")
    result = _cli(tmp_path, "serve", "--port", "0", CHAT_SHELL_LOCAL_MODEL_FILE=str(bogus))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: The local model file {bogus} is not a GGUF model (it does not start with the GGUF "
        "signature): set CHAT_SHELL_LOCAL_MODEL_FILE to a GGUF model file, or unset it to use a "
        "catalog model."
    )


@pytest.fixture
def model_cache_copy(tmp_path: Path) -> Path:
    """A model cache holding a copy of the installed SmolLM2 file, without its stamp."""
    model = require_local_model()
    cache = tmp_path / "models"
    cache.mkdir()
    shutil.copyfile(catalog_path(model, default_cache_dir()), catalog_path(model, cache))
    return cache


def _flip_a_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def test_a_corrupted_model_file_is_refused_naming_the_file_and_force(
    tmp_path: Path, model_cache_copy: Path, make_settings: Callable[..., Settings], sqlite_url: str
) -> None:
    model = CATALOG["smollm2-135m"]
    path = catalog_path(model, model_cache_copy)
    settings = smollm2_settings(make_settings, sqlite_url, local_model_cache=model_cache_copy)
    install_model(settings, lambda _: None)  # intact: verified and stamped
    _flip_a_byte(path, model.size_bytes // 2)  # changes the file after its stamp

    with pytest.raises(ModelFileError) as refused:
        install_model(settings, lambda _: None)
    message = str(refused.value)
    assert message.startswith(f"The local model file {path} is corrupt (sha256 ")
    assert message.endswith(
        f"expected {model.sha256}): run `chat-shell local-model install --force` to download it again."
    )
    result = _cli(
        tmp_path,
        *("serve", "--port", "0"),
        CHAT_SHELL_LOCAL_MODEL="smollm2-135m",
        CHAT_SHELL_LOCAL_MODEL_CACHE=str(model_cache_copy),
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == f"error: {message}"


def test_serve_starts_the_model_before_it_migrates_and_imports_the_app(tmp_path: Path) -> None:
    """A repeat start is ready after the longer of the model's load and the service's own start,
    not their sum: the model server runs before the migration, and the page answers (saying the
    model is starting) while the model still loads."""
    ready_when = tmp_path / "ready"
    port = free_port()
    environment = {
        **{k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")},
        "CHAT_SHELL_DATA_DIR": str(tmp_path / "data"),
        "CHAT_SHELL_LOCAL_MODEL_FILE": str(write_gguf(tmp_path / "stand-in.gguf")),
        "CHAT_SHELL_LOCAL_MODEL_SERVER": standin_command(ready_when=ready_when),
        "PYTHONPATH": str(ROOT),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "backend.cli", "serve", "--migrate", "--port", str(port)],
        cwd=tmp_path,
        env=environment,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/readyz"
        starting = _poll(lambda: httpx.get(url).status_code == 503)
        assert starting, "the service never answered while the model loaded"
        ready_when.touch()
        assert _poll(lambda: httpx.get(url).status_code == 200), "the model never became ready"
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    lines = stderr.splitlines()
    started = next(i for i, line in enumerate(lines) if "local model: starting" in line)
    migrated = next(i for i, line in enumerate(lines) if "Running upgrade" in line)
    served = next(i for i, line in enumerate(lines) if "Started server process" in line)
    assert started < migrated < served


def _poll(check: Callable[[], bool], timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if check():
                return True
        time.sleep(0.2)
    return False
