"""The container entrypoint's roles, run as the containers of docker-compose.yml run them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "deploy" / "docker" / "entrypoint.sh"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": f"{venv_bin}:{os.environ['PATH']}",
        "CHAT_SHELL_DATA_DIR": str(tmp_path),
        "CHAT_SHELL_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'app.db'}",
        "CHAT_SHELL_LOCAL_MODEL": "off",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        **extra,
    }


def test_migrate_then_backend_serves(tmp_path: Path) -> None:
    migrated = subprocess.run(
        [str(ENTRYPOINT), "migrate"], env=_env(tmp_path), capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stderr

    port = free_port()
    server = subprocess.Popen(
        [str(ENTRYPOINT), "backend"], env=_env(tmp_path, PORT=str(port), HOST="127.0.0.1"), cwd=tmp_path
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None, "backend exited during startup"
                assert time.monotonic() < deadline, "backend did not start"
                time.sleep(0.2)
        assert response.json() == {"status": "ready"}
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_migrate_gives_up_clearly_when_the_database_stays_down(tmp_path: Path) -> None:
    env = _env(
        tmp_path,
        CHAT_SHELL_DATABASE_URL="postgresql+asyncpg://nobody@127.0.0.1:9/none",
        MIGRATE_ATTEMPTS="2",
    )
    result = subprocess.run(
        [str(ENTRYPOINT), "migrate"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert "still unreachable after 2 attempts" in result.stderr


def test_other_commands_run_as_given(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(ENTRYPOINT), "echo", "hello"], env=_env(tmp_path), capture_output=True, text=True
    )
    assert result.stdout.strip() == "hello"


def test_the_worker_role_runs_the_worker_and_says_what_it_needs(tmp_path: Path) -> None:
    # On SQLite there is no queue: the worker refuses, with the fix, instead of waiting forever.
    result = subprocess.run(
        [str(ENTRYPOINT), "worker"], env=_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "worker needs PostgreSQL" in result.stderr
