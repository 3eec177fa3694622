"""Property-based fuzzing of the whole public API from its OpenAPI schema, authenticated as a
user: never a 5xx, and every error in the API's JSON shape.

About 300 generated cases in the default suite, at least 3,000 with CHAT_SHELL_DEEP=1 (valid
and invalid input to every operation), plus hostile cases built from the same schema for every
operation: ids past their column's range, negative and non-ASCII-digit ids, lone surrogates in
every string field, an oversized body, and malformed `Last-Event-ID` headers. The case counts
are printed (run with `-s`) as `fuzz: ...`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from backend.app import create_app
from backend.settings import Settings
from tests.conftest import DEEP
from tests.support import databases
from tests.support.api import PASSWORD, ROOMY_LIMITS
from tests.support.threaded_server import serve_in_thread

# Streams stay open by design: the generated cases leave them out; the hostile cases below
# send the stream only requests that end at once (a bad header, an unknown conversation).
STREAM_SUFFIX = "/stream"
GENERATED_CASES = 3_000 if DEEP else 300
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
HOSTILE_IDS = ["-1", "0", str(2**31), str(2**63), str(2**64), "%C2%B2", "1%C2%B2", "%D9%A1"]
HOSTILE_EVENT_IDS = ["1:²", "²:1", "1:-1", "-1:1", f"{2**63}:1", f"1:{2**31}", "1:1:1", ":", "x"]
LONE_SURROGATE = "a\ud800b"


@dataclass
class Tally:
    generated: int = 0
    hostile: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    server_errors: list[str] = field(default_factory=list)

    def record(self, where: str, response: httpx.Response | Any) -> None:
        status = response.status_code
        self.by_status[status] = self.by_status.get(status, 0) + 1
        if status >= 500:
            self.server_errors.append(f"{where}: {status} {response.text[:200]}")
            return
        if status >= 400:
            body = response.json()
            assert isinstance(body.get("code"), str) and isinstance(body.get("message"), str), where


@dataclass
class LiveApi:
    """The fuzzed server and the user's API token. The fuzzer itself revokes tokens now and then
    (`DELETE /api/auth/tokens/1`): `send` then makes a new token and sends the case again, so
    every case is answered as an authenticated user would be."""

    base_url: str
    conversation_id: int
    token: str = ""

    def renew(self) -> None:
        with httpx.Client(base_url=self.base_url) as client:
            login = client.post("/api/auth/login", json={"username": "fuzzer", "password": PASSWORD})
            client.headers["X-CSRF-Token"] = login.json()["csrf_token"]
            self.token = client.post("/api/auth/tokens", json={"name": "fuzz"}).json()["token"]

    def send(self, call: Callable[[dict[str, str]], httpx.Response]) -> httpx.Response:
        response = call({"Authorization": f"Bearer {self.token}"})
        if response.status_code == 401 and response.json().get("code") == "invalid_token":
            self.renew()
            response = call({"Authorization": f"Bearer {self.token}"})
        return response


@pytest.fixture(scope="module")
def live_api(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[LiveApi]:
    directory = tmp_path_factory.mktemp("fuzz")
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=directory / "data",
        database_url=databases.sqlite_copy(sqlite_template, directory),
        local_model="off",
        openai_base_url="http://127.0.0.1:9/v1",
        password_hash_profile="CHEAPEST",
        telemetry_enabled=False,
        **ROOMY_LIMITS,  # type: ignore[arg-type]
    )
    with serve_in_thread(create_app(settings)) as base_url, httpx.Client(base_url=base_url) as client:
        client.post("/api/auth/register", json={"username": "fuzzer", "password": PASSWORD})
        api = LiveApi(base_url, conversation_id=0)
        api.renew()
        conversation = client.post(
            "/api/conversations", json={"title": "seed"}, headers={"Authorization": f"Bearer {api.token}"}
        )
        api.conversation_id = conversation.json()["id"]
        yield api


@pytest.fixture(scope="module")
def tally() -> Iterator[Tally]:
    counts = Tally()
    yield counts
    print(
        f"\nfuzz: {counts.generated} generated + {counts.hostile} hostile cases, "
        f"{len(counts.server_errors)} responses of 5xx; by status {dict(sorted(counts.by_status.items()))}"
    )


def _operations(base_url: str) -> list[schemathesis.APIOperation]:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    return [operation for operation in operations if not operation.path.endswith(STREAM_SUFFIX)]


def _fuzz(
    live_api: LiveApi, tally: Tally, operation: schemathesis.APIOperation, mode: GenerationMode, examples: int
) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case: schemathesis.Case) -> None:
        response = live_api.send(lambda auth: case.call(base_url=live_api.base_url, headers=auth, timeout=30))
        tally.generated += 1
        tally.record(f"{case.method} {case.formatted_path}", response)

    try:
        check()
    except Unsatisfiable:
        # Operations without parameters or body have no invalid input to generate.
        assert mode is GenerationMode.NEGATIVE, f"{operation.method.upper()} {operation.path}"


# The deep run's 3,000 cases take about 5 minutes on 2 cores.
@pytest.mark.timeout(1800 if DEEP else 300)
def test_no_generated_request_gets_a_server_error(live_api: LiveApi, tally: Tally) -> None:
    """Valid and invalid requests to every operation; each gets a non-5xx JSON answer.

    Operations with few distinct inputs run out of new examples early, so rounds repeat (with
    the budget left, spread over every operation) until the total is reached."""
    operations = _operations(live_api.base_url)
    assert len(operations) >= 25
    for _round in range(5):
        remaining = GENERATED_CASES - tally.generated
        if remaining <= 0:
            break
        per_operation = math.ceil(remaining / (len(operations) * len(MODES)))
        for mode in MODES:
            for operation in operations:
                _fuzz(live_api, tally, operation, mode, per_operation)
    assert tally.generated >= GENERATED_CASES
    assert not tally.server_errors, "\n".join(tally.server_errors)


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _string_fields(spec: dict[str, Any], operation: dict[str, Any]) -> list[str]:
    content = operation.get("requestBody", {}).get("content", {})
    if "application/json" not in content:
        return []
    schema = _resolve(spec, content["application/json"]["schema"])
    fields = []
    for name, prop in schema.get("properties", {}).items():
        kinds = [_resolve(spec, option).get("type") for option in prop.get("anyOf", [prop])]
        if "string" in kinds:
            fields.append(name)
    return fields


def _hostile_requests(spec: dict[str, Any], seed_id: int) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(method, url, httpx request options) for every operation of the schema."""
    for template, methods in spec["paths"].items():
        for method, operation in methods.items():
            params = [p["name"] for p in operation.get("parameters", []) if p["in"] == "path"]
            for bad in HOSTILE_IDS if params else []:
                yield method, template.format(**dict.fromkeys(params, bad)), {}
            concrete = template.format(**dict.fromkeys(params, str(seed_id)))
            for name in _string_fields(spec, operation):
                body = json.dumps({name: LONE_SURROGATE}).encode()  # "\ud800" as a JSON escape
                yield method, concrete, {"content": body, "headers": {"Content-Type": "application/json"}}
            if "requestBody" in operation:
                huge = json.dumps({"padding": "x" * 2_000_000}).encode()
                yield method, concrete, {"content": huge, "headers": {"Content-Type": "application/json"}}
            if template.endswith(STREAM_SUFFIX):
                for value in HOSTILE_EVENT_IDS:
                    raw = value.encode("latin-1") if all(ord(c) < 256 for c in value) else value.encode()
                    yield method, concrete, {"headers": {"Last-Event-ID": raw}}


def test_hostile_requests_get_no_server_error(live_api: LiveApi, tally: Tally) -> None:
    with httpx.Client(base_url=live_api.base_url, timeout=30) as client:
        spec = client.get("/openapi.json").json()
        for method, url, options in _hostile_requests(spec, live_api.conversation_id):
            extra = options.pop("headers", {})
            response = live_api.send(
                lambda auth: client.request(method.upper(), url, headers={**auth, **extra}, **options)  # noqa: B023
            )
            tally.hostile += 1
            tally.record(f"{method.upper()} {url}", response)
            assert 400 <= response.status_code < 500, f"{method.upper()} {url}: {response.status_code}"
    assert tally.hostile >= 200
    assert not tally.server_errors, "\n".join(tally.server_errors)
