"""No working default secret: what the service refuses to start with, through its real entry
point (`chat-shell`), what `make env` writes, and docker compose without one."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.secret_policy import COMPOSE_SECRETS, new_secret, weakness
from backend.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDERS = ["change-me", "changeme", "admin", "secret", "CHANGE_ME", "password", "my-secret-key"]

# `secrets.token_urlsafe(16)` once: random, but half the strength a secret needs (fixed, so that
# every pytest-xdist worker collects the same test ids).
SIXTEEN_RANDOM_BYTES = "8J7MklD6QwdINzAug69TWg"


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`chat-shell ...` as an operator runs it, in a directory without a .env."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_SHELL_", "OPENAI_"))}
    return subprocess.run(
        [sys.executable, "-m", "backend.cli", *args],
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(ROOT), "CHAT_SHELL_LOCAL_MODEL": "off", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("value", [*PLACEHOLDERS, "change-me" * 6, "x" * 64, SIXTEEN_RANDOM_BYTES, ""])
def test_placeholders_short_and_repetitive_values_are_not_secrets(value: str) -> None:
    assert weakness(value) is not None


def test_thirty_two_random_bytes_are_a_secret() -> None:
    for value in (new_secret(), secrets.token_hex(32), secrets.token_urlsafe(48)):
        assert weakness(value) is None, value
    assert weakness(secrets.token_hex(31)) is not None  # 31 bytes in hex


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, "CHAT_SHELL_SERVICE_TOKEN is not set"),
        ({"CHAT_SHELL_SERVICE_TOKEN": "change-me"}, "CHAT_SHELL_SERVICE_TOKEN is a placeholder"),
        ({"CHAT_SHELL_SERVICE_TOKEN": "tok"}, "CHAT_SHELL_SERVICE_TOKEN is too weak"),
        ({"CHAT_SHELL_SERVICE_TOKEN": new_secret()}, "CHAT_SHELL_CAPABILITY_KEY is not set"),
        (
            {"CHAT_SHELL_SERVICE_TOKEN": new_secret(), "CHAT_SHELL_CAPABILITY_KEY": "admin"},
            "CHAT_SHELL_CAPABILITY_KEY is a placeholder",
        ),
        (
            {"CHAT_SHELL_SERVICE_TOKEN": (same := new_secret()), "CHAT_SHELL_CAPABILITY_KEY": same},
            "must differ from CHAT_SHELL_SERVICE_TOKEN",
        ),
        (
            {
                "CHAT_SHELL_SERVICE_TOKEN": new_secret(),
                "CHAT_SHELL_CAPABILITY_KEY": new_secret(),
                "CHAT_SHELL_METRICS_TOKEN": "change-me",
            },
            "CHAT_SHELL_METRICS_TOKEN is a placeholder",
        ),
    ],
)
def test_the_backend_in_service_mode_refuses_to_start_without_strong_secrets(
    tmp_path: Path, env: dict[str, str], says: str
) -> None:
    started = _cli(
        "serve",
        "--port",
        "0",
        cwd=tmp_path,
        env={
            "CHAT_SHELL_RUNTIME_MODE": "service",
            "CHAT_SHELL_DATA_DIR": str(tmp_path),
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            **env,
        },
    )
    assert started.returncode != 0
    assert says in started.stderr, started.stderr
    assert "secrets.token_urlsafe(32)" in started.stderr and "make env" in started.stderr


@pytest.mark.parametrize(
    ("command", "variable", "value"),
    [
        ("service", "CHAT_SHELL_SERVICE_TOKEN", "change-me"),
        # Single process (package mode) needs no secret, but a metrics token set must be a real one.
        ("serve", "CHAT_SHELL_METRICS_TOKEN", "admin"),
    ],
)
def test_the_chat_shell_service_and_a_metrics_token_are_checked_too(
    tmp_path: Path, command: str, variable: str, value: str
) -> None:
    started = _cli(
        command,
        "--port",
        "0",
        cwd=tmp_path,
        env={variable: value, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
    )
    assert started.returncode != 0 and f"{variable} is a placeholder" in started.stderr


def _env_file(path: Path) -> dict[str, str]:
    pairs = (
        line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#")
    )
    return {name: value for name, value in pairs}


def test_chat_shell_env_writes_fresh_secrets_once(tmp_path: Path) -> None:
    made = _cli("env", cwd=tmp_path, env={})
    assert made.returncode == 0, made.stderr
    written = _env_file(tmp_path / ".env")
    assert set(written) == set(COMPOSE_SECRETS)
    assert all(weakness(value) is None for value in written.values())
    assert len(set(written.values())) == len(written)
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
    again = _cli("env", cwd=tmp_path, env={})
    assert again.returncode != 0 and "--force" in again.stderr
    assert _env_file(tmp_path / ".env") == written
    forced = _cli("env", "--force", cwd=tmp_path, env={})
    assert forced.returncode == 0 and _env_file(tmp_path / ".env").keys() == written.keys()
    assert _env_file(tmp_path / ".env") != written
    # `make env` runs the same writer with the system Python, before any virtualenv exists.
    plain = subprocess.run(
        [sys.executable, "-S", "-m", "backend.secret_policy", "--path", str(tmp_path / "plain.env")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plain.returncode == 0, plain.stderr
    assert set(_env_file(tmp_path / "plain.env")) == set(COMPOSE_SECRETS)


def _compose() -> list[str]:
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("docker compose is missing: scripts/services.sh installs it")


def _compose_config(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in COMPOSE_SECRETS}
    return subprocess.run(
        [
            *_compose(),
            "--project-directory",
            str(project),
            "-f",
            str(project / "docker-compose.yml"),
            "config",
        ],
        cwd=project,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def compose_project(tmp_path: Path) -> Path:
    """The repository's docker-compose.yml in a directory of its own (no .env beside it)."""
    shutil.copy(ROOT / "docker-compose.yml", tmp_path / "docker-compose.yml")
    return tmp_path


def test_compose_refuses_to_start_without_its_secrets(compose_project: Path) -> None:
    missing = _compose_config(compose_project, {})
    assert missing.returncode != 0
    assert "is not set: run `make env`" in missing.stderr, missing.stderr
    for name in COMPOSE_SECRETS:
        partial = {other: new_secret() for other in COMPOSE_SECRETS if other != name}
        refused = _compose_config(compose_project, partial)
        assert refused.returncode != 0 and f"{name} is not set" in refused.stderr, (name, refused.stderr)


def test_compose_starts_with_what_make_env_writes(compose_project: Path) -> None:
    assert _cli("env", cwd=compose_project, env={}).returncode == 0
    written = _env_file(compose_project / ".env")
    config = _compose_config(compose_project, {})
    assert config.returncode == 0, config.stderr
    # Every secret reaches the service that needs it; the chat_shell service never gets the
    # capability key, and no default is left.
    services = yaml.safe_load(config.stdout)["services"]
    backend, chat_shell = services["backend"]["environment"], services["chat_shell"]["environment"]
    assert backend["CHAT_SHELL_SERVICE_TOKEN"] == chat_shell["CHAT_SHELL_SERVICE_TOKEN"]
    assert backend["CHAT_SHELL_SERVICE_TOKEN"] == written["CHAT_SHELL_SERVICE_TOKEN"]
    assert backend["CHAT_SHELL_CAPABILITY_KEY"] == written["CHAT_SHELL_CAPABILITY_KEY"]
    assert "CHAT_SHELL_CAPABILITY_KEY" not in chat_shell
    assert (
        services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == written["GRAFANA_ADMIN_PASSWORD"]
    )
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == written["POSTGRES_PASSWORD"]
    assert f":{written['POSTGRES_PASSWORD']}@postgres" in backend["CHAT_SHELL_DATABASE_URL"]
    # The backend believes X-Forwarded-For from the nginx container's fixed address only.
    proxy_address = services["proxy"]["networks"]["default"]["ipv4_address"]
    assert backend["CHAT_SHELL_TRUSTED_PROXIES"] == proxy_address
    # Two workers run the turns, with the key that mints their capabilities and a grace period
    # longer than their drain, so a rolling restart hands nothing back that could have ended.
    worker = services["worker"]
    assert worker["command"] == ["worker"] and worker["deploy"]["replicas"] == 2
    assert worker["environment"]["CHAT_SHELL_CAPABILITY_KEY"] == written["CHAT_SHELL_CAPABILITY_KEY"]
    assert worker["environment"]["CHAT_SHELL_DATABASE_URL"] == backend["CHAT_SHELL_DATABASE_URL"]
    grace = worker["stop_grace_period"]
    assert _seconds(grace) > Settings(_env_file=None).worker_drain_seconds  # type: ignore[call-arg]


def _seconds(duration: str | int | float) -> float:
    """A compose duration ("130s", "2m10s", or seconds) in seconds."""
    if isinstance(duration, int | float):
        return float(duration)
    units = {"h": 3600, "m": 60, "s": 1}
    return float(sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([hms])", duration)))
