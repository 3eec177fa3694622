"""Web hardening an operator and a user would notice: security headers on every response,
`Secure` cookies and HSTS over HTTPS (direct, or a trusted proxy's word only), offline /docs,
case-insensitive usernames, token expiry and minting rules, password change and log out
everywhere."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import yaml
from starlette.types import Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from backend.app import create_app
from backend.settings import Settings
from tests.conftest import ROOT
from tests.support.api import PASSWORD, login, register
from tests.support.servers import serve
from tests.support.uploads import upload_ok

ServeWith = Callable[..., AbstractAsyncContextManager[str]]
CSP_NEEDED = ("default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "object-src 'none'")


def assert_hardened(response: httpx.Response, where: str) -> None:
    headers = response.headers
    csp = headers.get("content-security-policy", "")
    assert all(part in csp for part in CSP_NEEDED) or "sandbox" in csp, f"{where}: CSP {csp!r}"
    assert headers.get("x-content-type-options") == "nosniff", where
    assert headers.get("referrer-policy") == "same-origin", where


async def test_security_headers_on_every_kind_of_response(
    alice: httpx.AsyncClient, anonymous: httpx.AsyncClient
) -> None:
    made = await upload_ok(alice, "notes.html", b"<script>alert(1)</script>")
    responses = {
        "JSON": await alice.get("/api/auth/me"),
        "401": await anonymous.get("/api/conversations"),
        "404": await alice.get("/api/conversations/999"),
        "422": await alice.post("/api/conversations", json={"title": 5}),
        "413": await alice.post("/api/conversations", content=b"x" * 2_000_000),
        "no such path": await anonymous.get("/nowhere"),
        "405": await anonymous.put("/healthz"),
        "page": await anonymous.get("/login"),
        "static": await anonymous.get("/static/js/auth-page.js"),
        "openapi": await anonymous.get("/openapi.json"),
        "docs": await anonymous.get("/docs"),
        "health": await anonymous.get("/healthz"),
        "download": await alice.get(f"/api/attachments/{made['id']}/download"),
    }
    for where, response in responses.items():
        assert_hardened(response, where)
    assert responses["413"].status_code == 413
    # A download keeps its own, stricter policy.
    assert responses["download"].headers["content-security-policy"] == "default-src 'none'; sandbox"
    # Over plain HTTP with no trusted proxy: no HSTS.
    assert all("strict-transport-security" not in r.headers for r in responses.values())


@pytest.fixture
def serve_with(sqlite_url: str, make_settings: Callable[..., Settings]) -> ServeWith:
    def start(**overrides: object) -> AbstractAsyncContextManager[str]:
        return serve(create_app(make_settings(sqlite_url, **overrides)))

    return start


async def _login_response(base_url: str, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base_url) as client:
        await client.post("/api/auth/register", json={"username": "carol", "password": PASSWORD})
        return await client.post(
            "/api/auth/login", json={"username": "carol", "password": PASSWORD}, headers=headers
        )


def _cookies_secure(response: httpx.Response) -> list[bool]:
    return ["secure" in line.lower().split("; ") for line in response.headers.get_list("set-cookie")]


@pytest.mark.parametrize(
    ("overrides", "headers", "https"),
    [
        ({}, {}, False),
        # Anyone can send the header; without a trusted proxy it means nothing.
        ({}, {"X-Forwarded-Proto": "https"}, False),
        ({"trusted_proxies": "10.0.0.1"}, {"X-Forwarded-Proto": "https"}, False),
        ({"trusted_proxies": "127.0.0.1"}, {"X-Forwarded-Proto": "https"}, True),
        ({"trusted_proxies": "127.0.0.0/8"}, {"X-Forwarded-Proto": "https"}, True),
        ({"trusted_proxies": "127.0.0.1"}, {"X-Forwarded-Proto": "http"}, False),
        ({"https_only": True}, {}, True),
    ],
)
async def test_secure_cookies_and_hsts_only_over_https(
    serve_with: ServeWith,
    overrides: dict[str, object],
    headers: dict[str, str],
    https: bool,
) -> None:
    async with serve_with(**overrides) as base_url:
        response = await _login_response(base_url, headers)
    assert response.status_code == 200
    secure = _cookies_secure(response)
    assert len(secure) == 2 and all(flag is https for flag in secure), response.headers.get_list("set-cookie")
    assert ("strict-transport-security" in response.headers) is https
    if https:
        assert response.headers["strict-transport-security"] == "max-age=31536000"


async def test_docs_are_served_locally_or_off(
    serve_with: ServeWith,
) -> None:
    async with serve_with() as base_url, httpx.AsyncClient(base_url=base_url) as client:
        page = await client.get("/docs")
        assert page.status_code == 200
        assert "cdn" not in page.text.lower() and "https://" not in page.text
        for asset in ("/docs-assets/swagger-ui-bundle.js", "/docs-assets/swagger-ui.css"):
            assert (await client.get(asset)).status_code == 200, asset
        assert (await client.get("/redoc")).status_code == 404
    async with serve_with(api_docs=False) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        assert (await client.get("/docs")).status_code == 404
        assert (await client.get("/docs-assets/swagger-ui-bundle.js")).status_code == 404
        assert (await client.get("/openapi.json")).status_code == 200


async def test_usernames_are_unique_whatever_their_case(server: str, anonymous: httpx.AsyncClient) -> None:
    await register(anonymous, "Alice")
    for look_alike in ("alice", "ALICE", "aLiCe"):
        response = await anonymous.post(
            "/api/auth/register", json={"username": look_alike, "password": PASSWORD}
        )
        assert response.status_code == 409 and response.json()["code"] == "username_taken", look_alike
    client = await login(server, "aLICE")
    me = (await client.get("/api/auth/me")).json()
    await client.aclose()
    assert me["username"] == "Alice"


async def _token(client: httpx.AsyncClient, **body: object) -> dict:
    response = await client.post("/api/auth/tokens", json={"name": "ci", **body})
    assert response.status_code == 201, response.text
    return response.json()


async def test_tokens_expire_by_default_and_cannot_mint_tokens(server: str, alice: httpx.AsyncClient) -> None:
    made = await _token(alice)
    expires = datetime.fromisoformat(made["expires_at"])
    assert timedelta(days=89) < expires - datetime.now(UTC) <= timedelta(days=90)
    short = await _token(alice, expires_in_days=1)
    assert datetime.fromisoformat(short["expires_at"]) - datetime.now(UTC) <= timedelta(days=1)
    async with httpx.AsyncClient(
        base_url=server, headers={"Authorization": f"Bearer {made['token']}"}
    ) as bearer:
        assert (await bearer.get("/api/auth/me")).status_code == 200
        minted = await bearer.post("/api/auth/tokens", json={"name": "child"})
        assert minted.status_code == 403 and minted.json()["code"] == "token_cannot_mint"
    assert len((await alice.get("/api/auth/tokens")).json()) == 2


async def test_password_change_ends_the_other_sessions(server: str, alice: httpx.AsyncClient) -> None:
    other = await login(server, "alice")
    token = (await _token(alice))["token"]
    wrong = await alice.post(
        "/api/auth/password", json={"current_password": "not it at all", "new_password": "a new secret 42"}
    )
    assert wrong.status_code == 401 and wrong.json()["code"] == "invalid_credentials"
    weak = await alice.post(
        "/api/auth/password", json={"current_password": PASSWORD, "new_password": "short"}
    )
    assert weak.status_code == 422 and weak.json()["code"] == "weak_password"
    assert (await other.get("/api/auth/me")).status_code == 200  # failed attempts end nothing

    changed = await alice.post(
        "/api/auth/password", json={"current_password": PASSWORD, "new_password": "a new secret 42"}
    )
    assert changed.status_code == 204
    assert (await alice.get("/api/auth/me")).status_code == 200  # this session stays
    assert (await other.get("/api/auth/me")).status_code == 401
    await other.aclose()
    async with httpx.AsyncClient(base_url=server) as fresh:
        old = await fresh.post("/api/auth/login", json={"username": "alice", "password": PASSWORD})
        assert old.status_code == 401
        new = await fresh.post("/api/auth/login", json={"username": "alice", "password": "a new secret 42"})
        assert new.status_code == 200
    async with httpx.AsyncClient(base_url=server, headers={"Authorization": f"Bearer {token}"}) as bearer:
        assert (await bearer.get("/api/auth/me")).status_code == 200  # tokens are revoked on their own


async def test_log_out_everywhere(server: str, alice: httpx.AsyncClient, bob: httpx.AsyncClient) -> None:
    others = [await login(server, "alice") for _ in range(2)]
    token = (await _token(alice))["token"]
    response = await alice.post("/api/auth/logout-everywhere")
    assert response.status_code == 204
    for client in [alice, *others]:
        assert (await client.get("/api/auth/me")).status_code == 401
    for client in others:
        await client.aclose()
    assert (await bob.get("/api/auth/me")).status_code == 200  # another account is untouched
    async with httpx.AsyncClient(base_url=server, headers={"Authorization": f"Bearer {token}"}) as bearer:
        assert (await bearer.get("/api/auth/me")).status_code == 200


async def _client_seen(trusted: str, peer: str) -> tuple[str, str]:
    """The (client host, scheme) the app sees for a request from `peer` that forwards
    203.0.113.9 over HTTPS, as the middleware create_app adds for `trusted` has it."""
    seen: dict[str, object] = {}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.update(scope)

    scope = {
        "type": "http",
        "scheme": "http",
        "client": (peer, 40000),
        "headers": [(b"x-forwarded-for", b"203.0.113.9"), (b"x-forwarded-proto", b"https")],
    }
    await ProxyHeadersMiddleware(app, trusted_hosts=trusted)(scope, None, None)  # type: ignore[arg-type]
    return seen["client"][0], seen["scheme"]  # type: ignore[index]


async def test_compose_trusts_exactly_its_proxy() -> None:
    """The compose backend believes forwarded headers from the nginx container's fixed address
    (read as an address, not as a literal name), and from nobody else."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    trusted = compose["x-app"]["environment"]["CHAT_SHELL_TRUSTED_PROXIES"]
    proxy_address = compose["services"]["proxy"]["networks"]["default"]["ipv4_address"]
    assert await _client_seen(trusted, proxy_address) == ("203.0.113.9", "https")
    assert await _client_seen(trusted, "172.28.0.11") == ("172.28.0.11", "http")
