"""Package mode and service mode side by side, for the tests that compare them.

`open_modes` (a fixture, for every backend test) opens a package-mode backend and a
service-mode one (`runtime_mode="service"`, driving a chat_shell service over real HTTP) on two
identically seeded databases, with the history case table of tests/support/history.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.app import create_app
from backend.db import session_factory
from backend.runtime_factory import create_service_app
from backend.settings import Settings
from tests.support import databases
from tests.support.api import new_user
from tests.support.capabilities import CAPABILITY_KEY, SERVICE_TOKEN
from tests.support.history import seed_cases
from tests.support.scripted_provider import Reply, ScriptedProvider
from tests.support.servers import free_port, serve


@dataclass
class Mode:
    name: str
    client: httpx.AsyncClient
    cases: dict[str, int]


@dataclass
class Modes:
    package: Mode
    service: Mode
    provider: ScriptedProvider

    async def both(self, path: str) -> tuple[Any, Any]:
        answers = []
        for mode in (self.package, self.service):
            response = await mode.client.get(path)
            assert response.status_code == 200, (mode.name, response.text)
            answers.append(response.json())
        return answers[0], answers[1]

    async def turn(self, mode: Mode, case: str, content: str, *script: Reply) -> tuple[list[dict], dict]:
        """Sends one message and waits for the reply: the provider requests it caused, and the reply."""
        self.provider.reset()
        self.provider.script(*script)
        cid = mode.cases[case]
        response = await mode.client.post(
            f"/api/conversations/{cid}/messages", json={"content": content}, params={"wait": "true"}
        )
        assert response.status_code == 200, (mode.name, response.text)
        return list(self.provider.requests), response.json()["assistant_message"]


OpenModes = Callable[..., AbstractAsyncContextManager[Modes]]


@pytest.fixture
def open_modes(
    tmp_path: Path,
    sqlite_template: Path,
    make_settings: Callable[..., Settings],
    scripted_provider: ScriptedProvider,
) -> OpenModes:
    """Opens both modes; keyword settings go to both backends and to the chat_shell service."""

    @asynccontextmanager
    async def opened(**settings: Any) -> AsyncIterator[Modes]:
        provider_url = scripted_provider.base_url
        package_db = databases.sqlite_copy(sqlite_template, tmp_path)
        service_db = databases.sqlite_copy(sqlite_template, tmp_path)
        backend_port = free_port()
        package_settings = make_settings(
            package_db, openai_base_url=provider_url, data_dir=tmp_path / "p", **settings
        )
        service_settings = make_settings(
            service_db,
            openai_base_url=provider_url,
            data_dir=tmp_path / "s",
            runtime_mode="service",
            service_token=SERVICE_TOKEN,
            capability_key=CAPABILITY_KEY,
            backend_url=f"http://127.0.0.1:{backend_port}",
            **settings,
        )
        shell_settings = make_settings(
            package_db, openai_base_url=provider_url, service_token=SERVICE_TOKEN, **settings
        )
        async with serve(create_service_app(shell_settings)) as shell_url:
            service_settings.service_url = shell_url
            async with (
                serve(create_app(package_settings)) as package_url,
                serve(create_app(service_settings), port=backend_port) as service_url,
            ):
                made: list[Mode] = []
                for name, url, db in (
                    ("package", package_url, package_db),
                    ("service", service_url, service_db),
                ):
                    client = await new_user(url, "owner")
                    async with databases.engine_for(db) as engine:
                        made.append(Mode(name, client, await seed_cases(session_factory(engine), "owner")))
                try:
                    assert made[0].cases == made[1].cases  # identical seeds, identical ids
                    yield Modes(made[0], made[1], scripted_provider)
                finally:
                    for mode in made:
                        await mode.client.aclose()

    return opened
