"""Who may call what: every route of the app's route table × {anonymous, another user, the owner,
an operator} → the expected status, on SQLite and PostgreSQL.

The owner is a plain account that owns every object the paths name; the other user and the
operator own nothing of it (an operator sees dashboard figures, never another user's objects).
A route added to the app without a row here fails `test_every_route_is_in_the_matrix`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from starlette.routing import Mount

from backend.app import create_app
from backend.secret_policy import new_secret
from backend.settings import Settings
from tests.support import telemetry as telemetry_support
from tests.support.api import PASSWORD, login, new_operator, new_user, register
from tests.support.files import PNG_1X1
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.servers import serve
from tests.support.uploads import CONTENT_TYPE, multipart_body, upload_ok

ROLES = ("anonymous", "other", "owner", "operator")
SCRAPE_TOKEN = new_secret()


@dataclass(frozen=True)
class Row:
    """Expected status per role; `target` picks the owner's objects the path names (`shared`
    ones are only read; `fresh` ones are made for this row, since the owner's call changes
    them); `own_session`: each role calls from a session of its own (the call ends it)."""

    anonymous: int
    other: int
    owner: int
    operator: int
    body: Callable[[str], dict[str, Any]] | None = None
    target: str = "shared"
    own_session: bool = False
    example: str | None = field(default=None)  # the concrete path of a mount

    def expected(self, role: str) -> int:
        return getattr(self, role)


def everyone(status: int, **options: Any) -> Row:
    return Row(status, status, status, status, **options)


def signed_in(status: int, **options: Any) -> Row:
    return Row(401, status, status, status, **options)


def owner_only(status: int, **options: Any) -> Row:
    """The owner's object: anyone else gets 404, exactly as for a missing one."""
    return Row(401, 404, status, 404, **options)


def operators(**options: Any) -> Row:
    return Row(401, 403, 403, 200, **options)


def _json(payload: dict[str, Any]) -> Callable[[str], dict[str, Any]]:
    return lambda _role: {"json": payload}


_UPLOAD = {"content": multipart_body("notes.txt", b"hello"), "headers": {"Content-Type": CONTENT_TYPE}}

CONV = "/api/conversations/{conversation_id}"
MATRIX: dict[tuple[str, str], Row] = {
    ("GET", "/openapi.json"): everyone(200),
    ("GET", "/docs"): everyone(200),
    ("GET", "/docs-assets"): everyone(200, example="/docs-assets/swagger-ui.css"),
    ("GET", "/static"): everyone(200, example="/static/js/app.js"),
    ("GET", "/healthz"): everyone(200),
    ("GET", "/readyz"): everyone(200),
    # Pages: anonymous visitors are sent to the login page; logged-in ones away from it.
    ("GET", "/"): Row(303, 200, 200, 200),
    ("GET", "/c/{conversation_id}"): Row(303, 404, 200, 404),
    ("GET", "/operators"): Row(303, 404, 404, 200),
    ("GET", "/admin/users"): Row(303, 404, 404, 200),
    ("GET", "/account"): Row(303, 200, 200, 200),
    ("GET", "/login"): Row(200, 303, 303, 303),
    ("GET", "/register"): Row(200, 303, 303, 303),
    # Accounts
    ("POST", "/api/auth/register"): everyone(
        201, body=lambda role: {"json": {"username": f"new-{role}", "password": PASSWORD}}
    ),
    ("POST", "/api/auth/login"): everyone(200, body=_json({"username": "carol", "password": PASSWORD})),
    ("POST", "/api/auth/logout"): signed_in(204, own_session=True),
    ("POST", "/api/auth/password"): signed_in(
        204, body=_json({"current_password": PASSWORD, "new_password": PASSWORD})
    ),
    ("GET", "/api/auth/me"): signed_in(200),
    ("PUT", "/api/auth/language"): signed_in(200, body=_json({"language": "zh-CN"})),
    ("POST", "/api/auth/tokens"): signed_in(201, body=_json({"name": "matrix"})),
    ("GET", "/api/auth/tokens"): signed_in(200),
    ("DELETE", "/api/auth/tokens/{token_id}"): owner_only(200, target="fresh"),
    ("GET", "/api/auth/sessions"): signed_in(200),
    ("DELETE", "/api/auth/sessions/{session_id}"): owner_only(204, target="fresh"),
    # From each role's main session: the sessions it ends are this matrix's throwaway logins.
    ("POST", "/api/auth/logout-others"): signed_in(200),
    ("POST", "/api/auth/invites"): Row(401, 403, 403, 201, body=_json({})),
    ("GET", "/api/auth/invites"): operators(),
    ("DELETE", "/api/auth/invites/{invite_id}"): Row(401, 403, 403, 204, target="fresh"),
    # The operators' users page; the account acted on is a bystander's, made for the objects.
    ("GET", "/api/admin/users"): operators(),
    ("POST", "/api/admin/users"): Row(
        401, 403, 403, 201, body=_json({"username": "made-by-operator", "password": PASSWORD})
    ),
    ("POST", "/api/admin/users/{user_id}/disable"): operators(target="fresh"),
    ("POST", "/api/admin/users/{user_id}/enable"): operators(),
    ("POST", "/api/admin/users/{user_id}/password"): Row(
        401, 403, 403, 204, body=_json({"password": PASSWORD})
    ),
    ("PUT", "/api/admin/users/{user_id}/operator"): operators(),
    ("DELETE", "/api/admin/users/{user_id}/operator"): operators(),
    ("GET", "/api/admin/audit"): operators(),
    # Conversations
    ("POST", "/api/conversations"): signed_in(201, body=_json({"title": "new"})),
    ("GET", "/api/conversations"): signed_in(200),
    ("GET", CONV): owner_only(200),
    ("PATCH", CONV): owner_only(200, body=_json({"title": "renamed"})),
    ("DELETE", CONV): owner_only(204, target="fresh"),
    ("POST", f"{CONV}/fork"): owner_only(201, body=_json({"message_id": 2})),
    # Undoes a delete: the owner's live conversation has none (test_conversations_pin_archive undoes one).
    ("POST", f"{CONV}/restore"): owner_only(404),
    ("GET", f"{CONV}/messages"): owner_only(200),
    ("GET", f"{CONV}/export"): owner_only(200),
    ("GET", f"{CONV}/history"): owner_only(200),
    ("GET", f"{CONV}/context"): owner_only(200),
    ("GET", f"{CONV}/model-request"): owner_only(200),
    ("GET", f"{CONV}/next-model-request"): owner_only(200),
    ("GET", f"{CONV}/messages/outline"): owner_only(200),
    ("GET", f"{CONV}/messages/{{message_id}}/text"): owner_only(200),
    ("GET", f"{CONV}/attachments/{{attachment_id}}"): owner_only(200),
    ("GET", f"{CONV}/attachments/{{attachment_id}}/text"): owner_only(200),
    ("GET", f"{CONV}/attachments/{{attachment_id}}/image"): owner_only(200),
    ("GET", f"{CONV}/mcp-servers"): owner_only(200),
    ("PUT", f"{CONV}/mcp-servers"): owner_only(200, body=_json({"servers": []})),
    # Share links: made and revoked by the owner; what a link shows is for anyone who has it.
    ("POST", f"{CONV}/shares"): owner_only(201, body=_json({})),
    ("GET", f"{CONV}/shares"): owner_only(200),
    ("DELETE", "/api/shares/{share_token}"): owner_only(204, target="fresh"),
    ("GET", "/api/shares/{share_token}"): everyone(200),
    ("GET", "/s/{share_token}"): everyone(200),
    # Models, presets and search: each user's own (a preset of another is 404).
    ("GET", "/api/models"): signed_in(200),
    ("GET", "/api/search"): signed_in(200, example="/api/search?q=notes"),
    ("POST", "/api/presets"): signed_in(201, body=lambda role: {"json": {"name": f"p-{role}"}}),
    ("GET", "/api/presets"): signed_in(200),
    ("PATCH", "/api/presets/{preset_id}"): owner_only(200, body=_json({"instructions": "Be brief."})),
    ("DELETE", "/api/presets/{preset_id}"): owner_only(204, target="fresh"),
    # Turns. Stop: nothing runs in the shared conversation; the owner is told so.
    ("POST", f"{CONV}/messages"): owner_only(202, body=_json({"content": "hello"}), target="fresh"),
    ("POST", f"{CONV}/regenerate"): owner_only(202, target="fresh"),
    ("POST", f"{CONV}/versions"): owner_only(200, body=_json({"message_id": 2})),
    ("POST", f"{CONV}/stop"): owner_only(409),
    ("POST", f"{CONV}/approvals"): owner_only(409, body=_json({"call_id": "call_1", "allow": True})),
    # The shared conversation's turn is over: its events are replayed and the stream ends.
    ("GET", f"{CONV}/stream"): owner_only(200),
    # Attachments
    ("POST", "/api/attachments"): signed_in(201, body=lambda _role: dict(_UPLOAD)),
    ("GET", "/api/attachments/{attachment_id}"): owner_only(200),
    ("GET", "/api/attachments/{attachment_id}/download"): owner_only(200),
    ("GET", "/api/attachments/{attachment_id}/text"): owner_only(200),
    ("DELETE", "/api/attachments/{attachment_id}"): owner_only(204, target="fresh"),
    # Operators
    ("GET", "/api/metrics/summary"): operators(),
    ("GET", "/api/metrics/conversations/{conversation_id}"): operators(),
    ("GET", "/metrics"): operators(),
    # Last: it ends every session of each account, the ones the other rows use too.
    ("POST", "/api/auth/logout-everywhere"): signed_in(204, own_session=True),
}


def route_table(settings: Settings) -> set[tuple[str, str]]:
    """(method, path) of every route and mount the app serves (HEAD goes with GET)."""
    app = create_app(settings)
    table: set[tuple[str, str]] = set()
    for route in iter_route_contexts(app.routes):
        if isinstance(route.original_route, Mount):
            table.add(("GET", route.path))
            continue
        for method in (route.methods or set()) - {"HEAD"}:
            table.add((method, route.path))
    return table


def test_every_route_is_in_the_matrix(sqlite_url: str, make_settings: Callable[..., Settings]) -> None:
    table = route_table(make_settings(sqlite_url, telemetry_enabled=False))
    missing = sorted(table - MATRIX.keys())
    assert not missing, f"routes without a row in MATRIX (who may call them?): {missing}"
    stale = sorted(MATRIX.keys() - table)
    assert not stale, f"rows for routes the app no longer has: {stale}"


@dataclass
class Objects:
    """The owner's objects, by path parameter."""

    conversation_id: int
    message_id: int
    attachment_id: int
    token_id: int
    preset_id: int
    session_id: int  # another browser session of the owner
    user_id: int  # a bystander account (no role of the matrix)
    invite_id: int
    share_token: str


@dataclass
class Cast:
    base_url: str
    clients: dict[str, httpx.AsyncClient]
    usernames: dict[str, str]
    shared: Objects


async def _answered_conversation(owner: httpx.AsyncClient, provider: ScriptedProvider) -> tuple[int, int]:
    """A conversation with one finished turn that was sent an attachment (an image, so that
    every attachment route, its bytes for a model included, answers the owner)."""
    cid = (await owner.post("/api/conversations", json={"title": "owned"})).json()["id"]
    attachment = await upload_ok(owner, "owned.png", PNG_1X1, conversation_id=cid)
    provider.script(text("An answer."))
    sent = await owner.post(
        f"/api/conversations/{cid}/messages",
        json={"content": "Read my notes", "attachment_ids": [attachment["id"]]},
        params={"wait": "true"},
    )
    assert sent.status_code == 200, sent.text
    return cid, attachment["id"]


async def _objects(
    owner: httpx.AsyncClient, operator: httpx.AsyncClient, provider: ScriptedProvider
) -> Objects:
    cid, attachment_id = await _answered_conversation(owner, provider)
    token = (await owner.post("/api/auth/tokens", json={"name": "owned"})).json()
    preset = await owner.post("/api/presets", json={"name": f"owned-{cid}"})
    assert preset.status_code == 201, preset.text
    second = await login(str(owner.base_url), "alice")
    session = next(s for s in (await second.get("/api/auth/sessions")).json() if s["current"])
    await second.aclose()
    bystander = await register(owner, f"bystander-{cid}")
    invite = await operator.post("/api/auth/invites", json={})
    assert invite.status_code == 201, invite.text
    invite_id = (await operator.get("/api/auth/invites")).json()[0]["id"]
    share = (await owner.post(f"/api/conversations/{cid}/shares", json={})).json()
    return Objects(
        cid,
        1,
        attachment_id,
        token["id"],
        preset.json()["id"],
        session["id"],
        bystander["id"],
        invite_id,
        share["token"],
    )


@pytest.fixture
async def cast(
    database_url: str,
    chat_settings: Callable[..., Settings],
    scripted_provider: ScriptedProvider,
    telemetry: telemetry_support.Recorded,
) -> AsyncIterator[Cast]:
    settings = chat_settings(database_url, telemetry_enabled=True, metrics_token=SCRAPE_TOKEN)
    async with serve(create_app(settings)) as base_url:
        usernames = {"other": "bob", "owner": "alice", "operator": "olga"}
        clients = {
            "anonymous": httpx.AsyncClient(base_url=base_url, timeout=30),
            "other": await new_user(base_url, "bob"),
            "owner": await new_user(base_url, "alice"),
            "operator": await new_operator(base_url, database_url, "olga"),
        }
        await new_user(base_url, "carol")
        try:
            shared = await _objects(clients["owner"], clients["operator"], scripted_provider)
            yield Cast(base_url, clients, usernames, shared)
        finally:
            for client in clients.values():
                await client.aclose()


async def _call(client: httpx.AsyncClient, method: str, path: str, row: Row, role: str) -> httpx.Response:
    kept = httpx.Cookies(client.cookies)  # a login in this call must not change who the client is
    try:
        return await client.request(method, path, **(row.body(role) if row.body else {}))
    finally:
        client.cookies = kept


async def test_authorization_matrix(cast: Cast, scripted_provider: ScriptedProvider) -> None:
    owner = cast.clients["owner"]
    wrong: list[str] = []
    cells = 0
    for (method, template), row in MATRIX.items():
        objects = cast.shared
        if row.target == "fresh":
            objects = await _objects(owner, cast.clients["operator"], scripted_provider)
        path = row.example or template.format(**vars(objects))
        for role in ROLES:  # the owner last: its call may change or remove the object
            client = cast.clients[role]
            own = None
            if row.own_session and role != "anonymous":
                client = own = await login(cast.base_url, cast.usernames[role])
            response = await _call(client, method, path, row, role)
            if own is not None:
                await own.aclose()
            cells += 1
            if response.status_code != row.expected(role):
                wrong.append(
                    f"{method} {template} as {role}: {response.status_code} (expected "
                    f"{row.expected(role)}) {response.text[:120]}"
                )
    print(f"authorization matrix: {len(MATRIX)} routes x {len(ROLES)} roles = {cells} cells")
    assert not wrong, "\n".join(wrong)
