"""Share links (issue 22): a read-only snapshot of a conversation's current path that anyone
with the link reads without an account; the owner lists and revokes links; nobody else can;
files are listed only when the owner chose so; the model's view never leaks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.backend.conftest import ServeChat
from tests.support.api import assistant_reply, signed_in
from tests.support.scripted_provider import ScriptedProvider, text, tool_call
from tests.support.uploads import upload_ok


@pytest.fixture
async def base_url(serve_chat: ServeChat) -> AsyncIterator[str]:
    async with serve_chat() as url:
        yield url


async def test_a_link_shows_the_conversation_as_it_was_to_anyone_until_revoked(
    base_url: str, scripted_provider: ScriptedProvider
) -> None:
    async with (
        signed_in(base_url, "sharer") as owner,
        signed_in(base_url, "other") as stranger,
        httpx.AsyncClient(base_url=base_url) as anonymous,
    ):
        cid = int((await owner.post("/api/conversations", json={"title": "Trip plan"})).json()["id"])
        nothing = await owner.post(f"/api/conversations/{cid}/shares", json={})
        assert nothing.status_code == 422 and nothing.json()["code"] == "nothing_to_share"
        note = await upload_ok(owner, "budget.txt", b"1200 EUR for the hotel", conversation_id=cid)
        scripted_provider.script(
            tool_call("generate_report", {"rows": 1}), text("The **budget** is 1200 EUR.")
        )
        await assistant_reply(owner, cid, "What is the budget?", [note["id"]])

        created = await owner.post(f"/api/conversations/{cid}/shares", json={})
        assert created.status_code == 201, created.text
        link = created.json()
        assert link["path"] == f"/s/{link['token']}" and len(link["token"]) >= 43
        with_files = (
            await owner.post(f"/api/conversations/{cid}/shares", json={"include_attachments": True})
        ).json()

        # Sent after the link was made: not part of it.
        scripted_provider.script(text("Later answer."))
        await assistant_reply(owner, cid, "A later, private question")

        response = await anonymous.get(f"/api/shares/{link['token']}")
        assert response.status_code == 200, response.text
        shared = response.json()
        assert shared["title"] == "Trip plan"
        assert [(m["role"], m["text"]) for m in shared["messages"]] == [
            ("user", "What is the budget?"),
            ("assistant", "The **budget** is 1200 EUR."),
        ]
        assert shared["messages"][1]["tools"] == ["generate_report"]
        assert all(m["attachments"] == [] for m in shared["messages"])
        # The model's side never leaks: no chain, no summaries, no metrics.
        for secret in ("messages_chain", "context_metrics", "context_compactions", "1200 EUR for the hotel"):
            assert secret not in response.text
        listed = (await anonymous.get(f"/api/shares/{with_files['token']}")).json()
        assert [f["filename"] for f in listed["messages"][0]["attachments"]] == ["budget.txt"]
        page = await anonymous.get(link["path"])
        assert page.status_code == 200 and "Trip plan" in page.text

        # Only the owner lists and revokes; for anyone else the conversation and link do not exist.
        mine = (await owner.get(f"/api/conversations/{cid}/shares")).json()["items"]
        assert [item["token"] for item in mine] == [link["token"], with_files["token"]]
        assert (await stranger.get(f"/api/conversations/{cid}/shares")).status_code == 404
        assert (await stranger.post(f"/api/conversations/{cid}/shares", json={})).status_code == 404
        assert (await stranger.delete(f"/api/shares/{link['token']}")).status_code == 404
        assert (await anonymous.get(f"/api/shares/{link['token']}")).status_code == 200

        assert (await owner.delete(f"/api/shares/{link['token']}")).status_code == 204
        assert (await anonymous.get(f"/api/shares/{link['token']}")).status_code == 404
        assert (await anonymous.get(link["path"])).status_code == 404
        assert (await owner.delete(f"/api/shares/{link['token']}")).status_code == 404
        assert [
            i["token"] for i in (await owner.get(f"/api/conversations/{cid}/shares")).json()["items"]
        ] == [with_files["token"]]

        # A deleted conversation's links end with it.
        assert (await owner.delete(f"/api/conversations/{cid}")).status_code == 204
        assert (await anonymous.get(f"/api/shares/{with_files['token']}")).status_code == 404


@pytest.mark.parametrize("token", ["x" * 43, "not a token", "a" * 65])
async def test_an_unknown_or_malformed_token_is_refused_plainly(base_url: str, token: str) -> None:
    async with httpx.AsyncClient(base_url=base_url) as anonymous:
        response = await anonymous.get(f"/api/shares/{token}")
        assert response.status_code in (404, 422)
        assert response.json()["code"] in ("not_found", "validation_error")
        page = await anonymous.get(f"/s/{token}")
        assert page.status_code in (404, 422)
