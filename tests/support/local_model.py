"""The real embedded local model for tests: skip (or fail on CI) when it is not installed, and
the app configured as a fresh install is (no provider, CHAT_SHELL_LOCAL_MODEL=auto)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from backend.local_model.installer import model_installed, server_installed
from backend.settings import Settings


def require_local_model() -> None:
    """`scripts/test.sh` installs it (`chat-shell local-model install`); CI must have it."""
    if server_installed() and model_installed():
        return
    reason = "the local model is not installed: run `chat-shell local-model install`"
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(reason)
    pytest.skip(reason)


def local_settings(make_settings: Callable[..., Settings], database_url: str, **overrides: Any) -> Settings:
    """Settings with no provider configured, so the service starts the local model."""
    values: dict[str, Any] = {"openai_base_url": None, "openai_api_key": None, "local_model": "auto"}
    values.update(overrides)
    return make_settings(database_url, **values)


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
