"""Images reach models that accept them (issue 22, "Images"), end to end: the backend over HTTP,
the scripted provider recording the request the model got.

A model marked `accepts_images` gets each image attachment as an `image_url` part with the
file's bytes, after the preview block, on the turn that sends it and on every later turn that
shows the message; the guard counts each at `IMAGE_PART_TOKENS`. Any other model, and an image
too large or of a type providers do not take, gets the header and a note saying it cannot be
seen. The model-request view shows a placeholder, never the bytes; service mode sends the same
request as package mode.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest

from backend.app import create_app
from backend.settings import Settings
from chat_shell.accounting.token_counter import IMAGE_PART_TOKENS
from chat_shell.contracts import MAX_MODEL_IMAGE_BYTES
from tests.support.api import signed_in
from tests.support.files import PNG_1X1, corrupt
from tests.support.modes import OpenModes
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.servers import serve
from tests.support.uploads import upload_ok

SEES_IMAGES = {"*": {"accepts_images": True}}
UNSEEN = "You cannot see its content"
SHOWN = "shown to you as a picture"


@pytest.fixture
def open_chat(
    database_url: str, chat_settings: Callable[..., Settings]
) -> Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]:
    """A backend with the given settings and a user signed in to it."""

    @asynccontextmanager
    async def opener(user: str = "viewer", **overrides: object) -> AsyncIterator[httpx.AsyncClient]:
        settings = chat_settings(database_url, **overrides)
        async with serve(create_app(settings)) as base_url, signed_in(base_url, user) as client:
            yield client

    return opener


async def _send(client: httpx.AsyncClient, cid: int, content: str, ids: list[int]) -> None:
    response = await client.post(
        f"/api/conversations/{cid}/messages",
        params={"wait": "true"},
        json={"content": content, "attachment_ids": ids},
    )
    assert response.status_code == 200, response.text
    assert response.json()["assistant_message"]["status"] == "completed"


async def _conversation_with(
    client: httpx.AsyncClient, files: list[tuple[str, bytes]]
) -> tuple[int, list[int]]:
    cid = int((await client.post("/api/conversations", json={"title": "pictures"})).json()["id"])
    ids = [int((await upload_ok(client, name, data, conversation_id=cid))["id"]) for name, data in files]
    return cid, ids


def _user_messages(request: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def _image_urls(content: Any) -> list[str]:
    if isinstance(content, str):
        return []
    return [part["image_url"]["url"] for part in content if part.get("type") == "image_url"]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def _data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


async def test_a_model_that_accepts_images_sees_the_picture_on_every_turn(
    open_chat: Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]],
    scripted_provider: ScriptedProvider,
) -> None:
    async with open_chat(profiles=SEES_IMAGES) as client:
        cid, (image,) = await _conversation_with(client, [("dot.png", PNG_1X1)])
        scripted_provider.script(text("A single pixel."), text("Still one pixel."))
        await _send(client, cid, "What is in this picture?", [image])
        first = scripted_provider.chat_requests[-1]
        await _send(client, cid, "And now?", [])
        second = scripted_provider.chat_requests[-1]
        view = (await client.get(f"/api/conversations/{cid}/model-request")).json()

    (content,) = _user_messages(first)
    assert _image_urls(content) == [_data_url(PNG_1X1)]
    assert content[0]["type"] == "text" and SHOWN in content[0]["text"]
    assert content[-1] == {"type": "text", "text": "What is in this picture?"}, "the user's words come last"
    # The next turn shows the earlier message with its picture again (the history holds none).
    earlier, latest = _user_messages(second)
    assert _image_urls(earlier) == [_data_url(PNG_1X1)] and _image_urls(latest) == []
    # The model-request view names the picture and never carries its bytes.
    shown = [e for e in view["entries"] if e["role"] == "user"]
    assert any(f"[image image/png {len(PNG_1X1)} B]" in e["text"] for e in shown)
    assert base64.b64encode(PNG_1X1).decode() not in str(view)
    assert shown[0]["tokens"] >= IMAGE_PART_TOKENS


async def test_a_corrupt_image_is_stored_but_never_shown_to_a_model(
    open_chat: Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]],
    scripted_provider: ScriptedProvider,
) -> None:
    async with open_chat(profiles=SEES_IMAGES) as client:
        cid = int((await client.post("/api/conversations", json={"title": "broken"})).json()["id"])
        broken = await upload_ok(client, "broken.png", corrupt(PNG_1X1), conversation_id=cid)
        scripted_provider.script(text("It is damaged."))
        await _send(client, cid, "What is this?", [int(broken["id"])])
        content = _user_messages(scripted_provider.chat_requests[-1])[0]
    assert broken["status"] == "failed" and "the image could not be decoded" in broken["note"]
    assert _image_urls(content) == [] and "the image could not be decoded" in _text_of(content)


async def test_other_models_and_oversized_images_get_a_note_and_no_picture(
    open_chat: Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]],
    scripted_provider: ScriptedProvider,
) -> None:
    large = PNG_1X1 + b"\0" * (MAX_MODEL_IMAGE_BYTES + 1 - len(PNG_1X1))
    async with open_chat() as client:
        cid, ids = await _conversation_with(client, [("dot.png", PNG_1X1)])
        scripted_provider.script(text("I cannot see it."))
        await _send(client, cid, "What is in this picture?", ids)
        blind = _user_messages(scripted_provider.chat_requests[-1])[0]
    async with open_chat("seer", profiles=SEES_IMAGES, max_upload_bytes=2 * MAX_MODEL_IMAGE_BYTES) as client:
        cid, ids = await _conversation_with(client, [("dot.png", PNG_1X1), ("huge.png", large)])
        scripted_provider.script(text("One of them."))
        await _send(client, cid, "Compare these.", ids)
        mixed = _user_messages(scripted_provider.chat_requests[-1])[0]

    assert isinstance(blind, str) and UNSEEN in blind and _image_urls(blind) == []
    assert _image_urls(mixed) == [_data_url(PNG_1X1)], "only the image within the size limit is shown"
    block = _text_of(mixed)
    assert block.count(SHOWN) == 1 and block.count(UNSEEN) == 1


async def test_service_mode_sends_the_same_picture_as_package_mode(
    open_modes: OpenModes, scripted_provider: ScriptedProvider
) -> None:
    async with open_modes(profiles=SEES_IMAGES) as modes:
        requests = []
        for mode in (modes.package, modes.service):
            cid, ids = await _conversation_with(mode.client, [("dot.png", PNG_1X1)])
            scripted_provider.reset()
            scripted_provider.script(text("A pixel."))
            await _send(mode.client, cid, "What is this?", ids)
            requests.append(scripted_provider.chat_requests[-1])
    package, service = requests
    assert _image_urls(_user_messages(package)[-1]) == [_data_url(PNG_1X1)]
    assert package == service
