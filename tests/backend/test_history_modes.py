"""Package mode and service mode give the model the same bytes (SPEC 6.2, 6.4).

Two backends on two identically seeded databases: one runs chat_shell in-process, the other
(`runtime_mode="service"`) drives the chat_shell service over real HTTP, and that service loads
the history, the originals and the attachments back from the backend with the turn's
capability. The same turn is sent to both and the scripted provider's requests are compared
whole, byte for byte; so are the histories, the stored results and the tools' outputs.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from backend.app import create_app
from backend.runtime_factory import create_service_app
from backend.settings import Settings
from tests.support.api import new_user
from tests.support.capabilities import CAPABILITY_KEY, SERVICE_TOKEN
from tests.support.history import CASES, SUMMARY_PREFIX
from tests.support.modes import Modes, OpenModes
from tests.support.scripted_provider import Reply, ScriptedProvider, ScriptedToolCall, text
from tests.support.servers import serve

HISTORY_TOOLS = {"list_history", "read_message"}


@pytest.fixture
async def modes(open_modes: OpenModes) -> AsyncIterator[Modes]:
    async with open_modes() as both:
        yield both


def _tool_names(request: dict) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools", [])}


async def test_every_case_gives_the_model_the_same_bytes_in_both_modes(modes: Modes) -> None:
    for case in CASES:
        cid = modes.package.cases[case.name]
        package_history, service_history = await modes.both(f"/api/conversations/{cid}/history")
        assert package_history == service_history, case.name

        sent = {}
        for mode in (modes.package, modes.service):
            sent[mode.name] = await modes.turn(mode, case.name, "What did we decide?", text("We decided."))
        (package_requests, package_reply), (service_requests, service_reply) = (
            sent["package"],
            sent["service"],
        )
        assert len(package_requests) == 1, case.name
        # The whole request body: messages, tool schemas, model and options.
        assert json.dumps(package_requests) == json.dumps(service_requests), case.name
        assert package_reply["status"] == service_reply["status"] == "completed"
        assert package_reply["result"]["context_metrics"] == service_reply["result"]["context_metrics"]
        # The history tools are offered exactly when earlier turns were summarized.
        has_checkpoint = any(
            entry["role"] == "user" and "summary_compacted" in entry.get("metadata", {})
            for entry in package_history["messages"]
        )
        assert (_tool_names(package_requests[0]) >= HISTORY_TOOLS) == has_checkpoint, case.name

        # The new turn's chain ids are the provider's random completion ids; the rest is equal.
        after_package, after_service = await modes.both(f"/api/conversations/{cid}/history")
        assert _without_ids(after_package) == _without_ids(after_service), case.name


def _without_ids(history: dict) -> list[dict]:
    return [{**entry, "id": None} for entry in history["messages"]]


def _call(call_id: str, name: str, **args: Any) -> Reply:
    return Reply(tool_calls=[ScriptedToolCall(id=call_id, name=name, args=args)])


async def test_the_history_tools_read_the_same_originals_in_both_modes(modes: Modes) -> None:
    script = (
        _call("call_list", "list_history", limit=3),
        _call("call_back", "list_history", before_message_id=7, limit=50),
        _call("call_read", "read_message", message_id=3),
        _call("call_page", "read_message", message_id=3, offset=1, limit=2),
        _call("call_none", "read_message", message_id=999),
        text("Found it."),
    )
    runs = {}
    for mode in (modes.package, modes.service):
        runs[mode.name] = await modes.turn(mode, "newest_checkpoint_wins", "What was message three?", *script)
    package_requests, service_requests = runs["package"][0], runs["service"][0]
    assert len(package_requests) == len(script)
    assert json.dumps(package_requests) == json.dumps(service_requests)

    assert _tool_names(package_requests[0]) >= HISTORY_TOOLS
    results = {
        m["tool_call_id"]: m["content"] for m in package_requests[-1]["messages"] if m["role"] == "tool"
    }
    listed = json.loads(results["call_list"])
    assert [m["message_id"] for m in listed["messages"]] == [8, 9, 10]
    assert [m["summarized"] for m in listed["messages"]] == [True, False, False]
    assert listed["next_before_message_id"] == 8 and listed["has_more"] is True
    back = json.loads(results["call_back"])
    assert [m["message_id"] for m in back["messages"]] == [1, 2, 3, 4, 5, 6]
    assert back["has_more"] is False and back["messages"][0]["snippet"] == "one"
    assert re.fullmatch(r"2025-03-01 \d\d:\d\d UTC", back["messages"][0]["date"])
    read = json.loads(results["call_read"])
    assert (read["content"], read["role"], read["has_more"], read["total_chars"]) == ("two", "user", False, 3)
    page = json.loads(results["call_page"])
    assert (page["content"], page["offset"], page["next_offset"]) == ("wo", 1, None)
    assert "not part of this conversation" in results["call_none"]


async def test_a_model_that_calls_an_unoffered_history_tool_gets_a_tool_error(modes: Modes) -> None:
    for mode in (modes.package, modes.service):
        requests, reply = await modes.turn(
            mode, "no_checkpoint", "List the history.", _call("call_x", "list_history"), text("Sorry.")
        )
        assert not HISTORY_TOOLS & _tool_names(requests[0])
        answer = next(m for m in requests[-1]["messages"] if m.get("tool_call_id") == "call_x")
        assert answer["content"].startswith("Error: list_history is not a valid tool"), mode.name
        assert reply["status"] == "completed"


async def test_a_service_that_cannot_reach_the_backend_fails_the_turn_clearly(
    sqlite_url: str, make_settings: Callable[..., Settings], scripted_provider: ScriptedProvider
) -> None:
    shell_settings = make_settings(
        sqlite_url, openai_base_url=scripted_provider.base_url, service_token=SERVICE_TOKEN
    )
    async with serve(create_service_app(shell_settings)) as shell_url:
        settings = make_settings(
            sqlite_url,
            runtime_mode="service",
            service_url=shell_url,
            service_token=SERVICE_TOKEN,
            capability_key=CAPABILITY_KEY,
            backend_url="http://127.0.0.1:9",  # nothing listens there
        )
        async with serve(create_app(settings)) as base_url:
            client = await new_user(base_url, "owner")
            cid = (await client.post("/api/conversations", json={"title": "x"})).json()["id"]
            response = await client.post(
                f"/api/conversations/{cid}/messages", json={"content": "hello"}, params={"wait": "true"}
            )
            await client.aclose()
    reply = response.json()["assistant_message"]
    assert reply["status"] == "failed"
    assert reply["result"]["error"]["code"] == "history_unavailable"
    assert scripted_provider.requests == []  # the model is never called without its history


VERSION_CASES = ("checkpoint_on_another_version", "older_version_shown_again", "edit_below_a_checkpoint")


def _summaries(history: dict) -> list[str]:
    return [m["content"] for m in history["messages"] if "summary_compacted" in m.get("metadata", {})]


async def test_every_version_gives_the_model_the_same_bytes_in_both_modes(modes: Modes) -> None:
    """Each version of each versions case shown in turn: both modes resolve the same history
    (a checkpoint only where it is on that version's path) and send the same request."""
    for case in VERSION_CASES:
        cid = modes.package.cases[case]
        page = (await modes.package.client.get(f"/api/conversations/{cid}/messages")).json()["items"]
        versions = sorted({v for m in page for v in m.get("versions") or []})
        assert len(versions) >= 2, case
        for message_id in versions:
            for mode in (modes.package, modes.service):
                shown = await mode.client.post(
                    f"/api/conversations/{cid}/versions", json={"message_id": message_id}
                )
                assert shown.status_code == 200, (mode.name, shown.text)
            package_history, service_history = await modes.both(f"/api/conversations/{cid}/history")
            assert package_history == service_history, (case, message_id)
            if case == "checkpoint_on_another_version":
                # Message 3 ("two") made the checkpoint at 4; its edit (5) has none above it.
                expected = [f"{SUMMARY_PREFIX}\nS-other: one, two"] if message_id == 3 else []
                assert _summaries(package_history) == expected, message_id
            sent = {}
            for mode in (modes.package, modes.service):
                sent[mode.name] = await modes.turn(mode, case, "Where are we?", text("Here."))
            assert json.dumps(sent["package"][0]) == json.dumps(sent["service"][0]), (case, message_id)
