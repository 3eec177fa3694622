"""The browser pages: served by the backend, behind the login, other users' URLs not found."""

from __future__ import annotations

import httpx

from tests.support.api import new_user


async def test_pages_need_a_session_and_redirect_to_the_login(anonymous: httpx.AsyncClient) -> None:
    for path in ("/", "/c/1"):
        response = await anonymous.get(path)
        assert response.status_code == 303
        assert response.headers["location"] == f"/login?next={path}"
    login = await anonymous.get("/login")
    assert login.status_code == 200 and 'id="auth-form"' in login.text
    assert (await anonymous.get("/register")).status_code == 200


async def test_the_chat_page_and_its_assets(alice: httpx.AsyncClient) -> None:
    page = await alice.get("/")
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<script type="module" src="/static/js/app.js">' in page.text
    assert '"username": "alice"' in page.text
    assert (await alice.get("/login")).status_code == 303  # already logged in
    for asset in ("/static/js/app.js", "/static/css/app.css", "/static/vendor/marked.esm.js"):
        response = await alice.get(asset)
        assert response.status_code == 200, asset
    assert "javascript" in (await alice.get("/static/js/app.js")).headers["content-type"]


async def test_a_conversation_url_is_a_deep_link_for_its_owner_only(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    cid = (await alice.post("/api/conversations", json={"title": "Alice's plans"})).json()["id"]
    mine = await alice.get(f"/c/{cid}")
    assert mine.status_code == 200 and f'"conversation_id": {cid}' in mine.text
    for client in (bob, alice):
        missing = await client.get(f"/c/{cid if client is bob else cid + 1000}")
        assert missing.status_code == 404
        assert "Conversation not found" in missing.text and "Alice's plans" not in missing.text
    assert (await alice.get("/c/0")).status_code == 422


async def test_a_user_name_is_escaped_in_the_page(server: str) -> None:
    client = await new_user(server, "x.y-z_name")
    page = await client.get("/")
    assert '"username": "x.y-z_name"' in page.text
    await client.aclose()
