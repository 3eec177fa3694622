"""Property-based fuzzing of the whole public API from its OpenAPI schema: never a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from backend.app import create_app
from backend.settings import Settings
from tests.support import databases
from tests.support.api import PASSWORD
from tests.support.threaded_server import serve_in_thread

# Streams stay open by design; they are covered by the delivery tests.
SKIPPED_PATHS = ("/stream",)


@pytest.fixture(scope="module")
def live_api(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[tuple[str, str]]:
    directory = tmp_path_factory.mktemp("fuzz")
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=directory / "data",
        database_url=databases.sqlite_copy(sqlite_template, directory),
        local_model="off",
        openai_base_url="http://127.0.0.1:9/v1",
        password_hash_profile="CHEAPEST",
        telemetry_enabled=False,
    )
    with serve_in_thread(create_app(settings)) as base_url, httpx.Client(base_url=base_url) as client:
        client.post("/api/auth/register", json={"username": "fuzzer", "password": PASSWORD})
        login = client.post("/api/auth/login", json={"username": "fuzzer", "password": PASSWORD})
        client.headers["X-CSRF-Token"] = login.json()["csrf_token"]
        token = client.post("/api/auth/tokens", json={"name": "fuzz"}).json()["token"]
        client.post("/api/conversations", json={"title": "seed"})
        yield base_url, token


def where_of(operation: schemathesis.APIOperation) -> str:
    return f"{operation.method.upper()} {operation.path}"


def _operations(base_url: str) -> list[schemathesis.APIOperation]:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    return [
        result.ok() for result in schema.get_all_operations() if not result.ok().path.endswith(SKIPPED_PATHS)
    ]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_request_gets_a_server_error(live_api: tuple[str, str], mode: GenerationMode) -> None:
    """Valid and invalid requests to every operation; each gets a non-5xx JSON answer."""
    base_url, token = live_api
    operations = _operations(base_url)
    assert len(operations) >= 10
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case: schemathesis.Case) -> None:
            response = case.call(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
            where = f"{case.method} {case.formatted_path}"
            assert response.status_code < 500, f"{where}: {response.status_code} {response.text}"
            if response.status_code >= 400:
                body = response.json()
                assert isinstance(body.get("code"), str) and isinstance(body.get("message"), str), where

        try:
            check()
        except Unsatisfiable:
            # Operations without parameters or body have no invalid input to generate.
            assert mode is GenerationMode.NEGATIVE, where_of(operation)
