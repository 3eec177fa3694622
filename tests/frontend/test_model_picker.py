"""The model picker: several models from two providers, chosen at "new chat" and changed on an
open conversation between turns; the meter's scale (input room of the window) follows the model of
the next turn."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from tests.frontend.actions import conversation_id, send, start, wait_finished
from tests.frontend.conftest import screenshot
from tests.support.browser import Stack, serve_fresh_stack
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.threaded_server import serve_in_thread

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def cloud() -> Iterator[ScriptedProvider]:
    provider = ScriptedProvider()
    with serve_in_thread(provider.app) as url:
        provider.base_url = f"{url}/v1"
        yield provider


@pytest.fixture(scope="module")
def stack(
    sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory, cloud: ScriptedProvider
) -> Iterator[Stack]:
    """This module's backend: two models, the house one on the stack's provider."""
    directory = tmp_path_factory.mktemp("models")

    def models_file(house_url: str) -> Path:
        path = directory / "models.json"
        document = {
            "default": "house",
            "models": [
                {
                    "id": "house",
                    "label": "House model",
                    "base_url": house_url,
                    "model": "qwen2.5-7b-instruct",
                    "profile": {"context_window": 32_000, "max_output_tokens": 2_000},
                },
                {
                    "id": "cloud-mini",
                    "label": "Cloud mini",
                    "base_url": cloud.base_url,
                    "model": "gpt-4o-mini",
                },
            ],
        }
        path.write_text(json.dumps(document), encoding="utf-8")
        return path

    with serve_fresh_stack(sqlite_template, directory, models=models_file) as served:
        yield served


def _scale(client: httpx.Client, model_id: str) -> str:
    """The meter's one definition for `model_id`: used of its available input, and its window."""
    info = next(m for m in client.get("/api/models").json()["models"] if m["id"] == model_id)
    return f"of {info['available_input']:,} input tokens; window {info['context_window']:,}"


def _wait_saved(page: Page, cid: int, model_id: str) -> None:
    """Until the server holds `model_id` as the conversation's model."""
    page.wait_for_function(
        "async ([cid, id]) => (await (await fetch(`/api/conversations/${cid}`)).json()).model_profile === id",
        arg=[cid, model_id],
    )


def test_the_model_is_chosen_at_new_chat_and_changed_between_turns(
    page: Page, stack: Stack, cloud: ScriptedProvider, username: str
) -> None:
    cloud.reset()
    client = start(page, stack, username)
    picker = page.get_by_label("Model", exact=True)
    expect(picker).to_be_visible()
    assert picker.locator("option").all_inner_texts() == ["House model", "Cloud mini"]
    expect(picker).to_have_value("house")

    # At "new chat": the chosen model answers the first message.
    picker.select_option(label="Cloud mini")
    cloud.script(text("Cloud here."))
    send(page, "Which model are you?")
    wait_finished(page)
    expect(page.locator(".msg.assistant").last).to_contain_text("Cloud here.")
    cid = conversation_id(page)
    assert client.get(f"/api/conversations/{cid}").json()["model_profile"] == "cloud-mini"
    assert [body["model"] for body in cloud.chat_requests] == ["gpt-4o-mini"]
    assert stack.provider.chat_requests == []
    meter = page.locator("#context-meter .meter-used-of")
    expect(meter).to_contain_text(_scale(client, "cloud-mini"))

    # Changed on the open conversation: saved at once, the meter shows the next model's window.
    picker.select_option(label="House model")
    expect(meter).to_contain_text(_scale(client, "house"))
    _wait_saved(page, cid, "house")
    screenshot(page, "model-picker-switched")
    stack.provider.script(text("House here."))
    send(page, "And now?")
    wait_finished(page)
    expect(page.locator(".msg.assistant").last).to_contain_text("House here.")
    assert [body["model"] for body in stack.provider.chat_requests] == ["qwen2.5-7b-instruct"]
    assert len(cloud.chat_requests) == 1
    # Each reply names the model that wrote it, and when.
    replies = page.locator(".msg.assistant")
    expect(replies.locator(".msg-model")).to_have_text(["Cloud mini", "House model"])
    expect(replies.last.locator(".msg-head time")).to_have_attribute("datetime", re.compile(r"^\d{4}-"))

    # The choice belongs to the conversation: a reload shows it, "new chat" starts at the default.
    # Replies shown before the model list arrives name their models by id, then by label.
    models: list[Route] = []
    page.route(f"{stack.base_url}/api/models", lambda route: models.append(route))
    page.reload()
    expect(replies.locator(".msg-model")).to_have_text(["cloud-mini", "house"])
    models[0].continue_()
    page.unroute(f"{stack.base_url}/api/models")
    expect(picker).to_have_value("house")
    expect(replies.locator(".msg-model")).to_have_text(["Cloud mini", "House model"])
    expect(meter).to_contain_text(_scale(client, "house"))
    page.get_by_role("button", name="New chat").click()
    expect(picker).to_have_value("house")

    # While the conversation loads the picker takes no choice: one made then would be the new
    # chat's and be overwritten by the conversation's own when it arrives.
    held: list[Route] = []

    def hold_first(route: Route) -> None:
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route(f"{stack.base_url}/api/conversations/{cid}", hold_first)
    page.goto(f"{stack.base_url}/c/{cid}")
    expect(picker).to_be_disabled()
    held[0].continue_()
    expect(picker).to_be_enabled()
    expect(picker).to_have_value("house")
    picker.select_option(label="Cloud mini")
    expect(meter).to_contain_text(_scale(client, "cloud-mini"))
    _wait_saved(page, cid, "cloud-mini")
