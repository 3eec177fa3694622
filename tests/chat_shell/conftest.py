"""Fixtures for the runtime tests: the scripted provider and runtimes wired to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from chat_shell.providers.openai import ProviderConfig
from chat_shell.runtime import ChatShell, RuntimeConfig
from tests.support.scripted_provider import ScriptedProvider

MakeShell = Callable[..., ChatShell]


@pytest.fixture
def make_shell(scripted_provider: ScriptedProvider) -> MakeShell:
    """A `ChatShell` against the scripted provider; keyword overrides go to RuntimeConfig or ChatShell."""

    def factory(
        *, timeout: float = 10.0, max_retries: int = 0, base_url: str | None = None, **options: Any
    ) -> ChatShell:
        shell_options = {k: options.pop(k) for k in ("tools", "guard_factory") if k in options}
        config = RuntimeConfig(
            provider=ProviderConfig(
                base_url=base_url or scripted_provider.base_url,
                api_key="test-key",
                timeout_seconds=timeout,
                max_retries=max_retries,
            ),
            model=options.pop("model", "gpt-4o"),
            **options,
        )
        return ChatShell(config, **shell_options)

    return factory


@pytest.fixture
async def shell(make_shell: MakeShell) -> AsyncIterator[ChatShell]:
    runtime = make_shell()
    yield runtime
    assert await runtime.checkpoint_count() == 0, "a turn left checkpoints behind"
