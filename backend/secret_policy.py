"""What counts as a secret good enough to expose the service with, and a fresh `.env` of them.

Standard library only, so `make env` (`python3 -m backend.secret_policy`) runs before any
virtualenv exists. A secret is refused when it is missing, worth fewer than 32 random bytes
(256 bits, judged from its length and alphabet: 43 URL-safe base64 characters, 64 hex
digits), made of few distinct characters, or contains a known placeholder word. The checks a
backend and the chat_shell service run at start live here too, so a bad secret stops `serve`
before it imports the app.
"""

from __future__ import annotations

import argparse
import hmac
import math
import re
import secrets
import string
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backend.settings import Settings

MIN_BITS = 256
MIN_DISTINCT = 12
MAKE_ONE = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'
HOW_TO_FIX = f"make one with `{MAKE_ONE}`, or write a fresh .env for docker compose with `make env`"
# Compared with the value lowercased and stripped to letters and digits.
PLACEHOLDER_WORDS = (
    "changeme",
    "replaceme",
    "password",
    "passwd",
    "secret",
    "admin",
    "default",
    "example",
    "placeholder",
    "insecure",
    "token",
    "qwerty",
)
_HEX = frozenset(string.hexdigits)
_BASE64 = frozenset(string.ascii_letters + string.digits + "-_+/=")

# What `make env` writes for docker compose: every secret docker-compose.yml requires.
COMPOSE_SECRETS = {
    "CHAT_SHELL_SERVICE_TOKEN": "the backend authenticates to the chat_shell service with it",
    "CHAT_SHELL_CAPABILITY_KEY": "signs the per-turn capabilities the chat_shell service reads history with",
    "CHAT_SHELL_METRICS_TOKEN": "Prometheus scrapes /metrics with it",
    "POSTGRES_PASSWORD": "the database account of the backend",
    "GRAFANA_ADMIN_PASSWORD": "Grafana's admin account",
}


class WeakSecret(ValueError):
    """A secret the service refuses to start with; the message names it and says how to fix it."""


def _bits(value: str) -> float:
    chars = set(value)
    if chars <= _HEX:
        alphabet = 16
    elif chars <= _BASE64:
        alphabet = 64
    else:
        alphabet = 94
    return len(value) * math.log2(alphabet)


def weakness(value: str | None) -> str | None:
    """Why `value` is not a usable secret, or None when it is."""
    if not value:
        return "not set"
    folded = re.sub(r"[^a-z0-9]", "", value.lower())
    found = next((word for word in PLACEHOLDER_WORDS if word in folded), None)
    if found is not None:
        return f"a placeholder (it contains {found!r})"
    if _bits(value) < MIN_BITS or len(set(value)) < MIN_DISTINCT:
        return "too weak (it needs the strength of at least 32 random bytes)"
    return None


def require_strong(name: str, value: str | None, purpose: str) -> str:
    problem = weakness(value)
    if problem is not None:
        raise WeakSecret(f"{name} is {problem}; {purpose}. {HOW_TO_FIX}.")
    assert value is not None
    return value


def require_service_token(settings: Settings) -> str:
    """The service token, refused (`WeakSecret`) when missing, weak or a placeholder."""
    return require_strong(
        "CHAT_SHELL_SERVICE_TOKEN",
        settings.service_token,
        "service mode needs it, the same value for the backend and the chat_shell service",
    )


def require_metrics_token(settings: Settings) -> str | None:
    """The scraper's token when one is set (never a weak one); None leaves /metrics to operators."""
    if settings.metrics_token is None:
        return None
    return require_strong(
        "CHAT_SHELL_METRICS_TOKEN", settings.metrics_token, "Prometheus scrapes /metrics with it"
    )


def require_backend_secrets(settings: Settings) -> bytes:
    """Every secret a backend's configuration needs, checked before it serves (`WeakSecret`
    names the first one missing, weak or a placeholder, with the fix): the service token in
    service mode, the metrics token when one is set, and the capability key, returned."""
    if settings.runtime_mode == "service":
        require_service_token(settings)
    require_metrics_token(settings)
    return capability_key(settings)


def capability_key(settings: Settings) -> bytes:
    """The configured key (required in service mode, where every backend replica must verify
    what any of them minted), else a random one for this process: capabilities are then
    refused, as nothing in package mode needs them."""
    if settings.runtime_mode != "service" and settings.capability_key is None:
        return secrets.token_bytes(32)
    key = require_strong(
        "CHAT_SHELL_CAPABILITY_KEY",
        settings.capability_key,
        "it signs the per-turn capabilities the chat_shell service reads history with, and must be "
        "the same on every backend replica",
    )
    if settings.service_token is not None and hmac.compare_digest(key, settings.service_token):
        raise WeakSecret(
            "CHAT_SHELL_CAPABILITY_KEY must differ from CHAT_SHELL_SERVICE_TOKEN: the chat_shell service "
            f"holds the service token and must not be able to mint capabilities; {HOW_TO_FIX}."
        )
    return key.encode()


def new_secret() -> str:
    """32 random bytes, URL-safe; drawn again in the rare case it spells a placeholder word."""
    while weakness(value := secrets.token_urlsafe(32)) is not None:
        pass
    return value


def fresh_env() -> str:
    lines = ["# Written by `make env` (`chat-shell env`): fresh random secrets for docker compose."]
    for name, purpose in COMPOSE_SECRETS.items():
        lines += [f"# {purpose}", f"{name}={new_secret()}"]
    return "\n".join(lines) + "\n"


def write_env(path: Path, *, force: bool = False) -> None:
    """Writes a fresh `.env` (mode 0600); an existing one is kept unless `force`."""
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists; keep it, or replace its secrets with `--force`")
    path.write_text(fresh_env())
    path.chmod(0o600)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="chat-shell env", description="Write a .env with fresh random secrets for docker compose."
    )
    parser.add_argument("--path", type=Path, default=Path(".env"))
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    args = parser.parse_args(argv)
    try:
        write_env(args.path, force=args.force)
    except FileExistsError as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"wrote {args.path} with fresh secrets: {', '.join(COMPOSE_SECRETS)}", file=sys.stderr)


if __name__ == "__main__":
    main()
