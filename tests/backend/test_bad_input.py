"""Hostile input never answers 5xx: non-ASCII digits, ids past their column's range, lone
surrogates and oversized bodies get a 4xx JSON error, on SQLite and on PostgreSQL."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

from backend.api.limits import BodySizeLimit
from backend.services.decimals import ascii_decimal
from tests.support.uploads import CONTENT_TYPE, multipart_body, upload

# Past BIGINT (PostgreSQL raises on the bind), past 32-bit, and Python's digit-count limit.
HUGE = [2**63, 2**70, 10**30]
# `str.isdigit()` is true for each; `int()` raises on the first two and reads the others.
UNICODE_DIGITS = ["1²", "²", "١٢", "１２"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("42", 42),
        ("007", 7),
        ("", None),
        (" 1", None),
        ("+1", None),
        ("-1", None),
        ("1_0", None),
        ("1.0", None),
        ("9" * 5000, None),
        *((digits, None) for digits in UNICODE_DIGITS),
    ],
)
def test_ascii_decimal_reads_only_plain_digits(text: str, expected: int | None) -> None:
    assert ascii_decimal(text) == expected


def test_ascii_decimal_bounds() -> None:
    assert ascii_decimal("10", maximum=10) == 10
    assert ascii_decimal("11", maximum=10) is None
    assert ascii_decimal("0", minimum=1) is None


async def _conversation(client: httpx.AsyncClient) -> int:
    return (await client.post("/api/conversations", json={"title": "t"})).json()["id"]


def _assert_client_error(response: httpx.Response, where: str) -> None:
    assert 400 <= response.status_code < 500, f"{where}: {response.status_code} {response.text}"
    body = response.json()
    assert isinstance(body["code"], str) and isinstance(body["message"], str), where


@pytest.mark.parametrize("value", [*UNICODE_DIGITS, "1:²", "²:1", "1:١", f"{2**63}:1", f"1:{2**31}"])
async def test_unicode_digits_and_huge_numbers_in_last_event_id(alice: httpx.AsyncClient, value: str) -> None:
    cid = await _conversation(alice)
    # Header bytes are read as Latin-1: byte 0xB2 arrives as "²". Others arrive as UTF-8 bytes.
    raw = value.encode("latin-1") if all(ord(c) < 256 for c in value) else value.encode()
    response = await alice.get(f"/api/conversations/{cid}/stream", headers={"Last-Event-ID": raw})
    if ":" in value and value.split(":")[0].isascii() and value.split(":")[1].isascii():
        # Well-formed but out of range: no such turn or position.
        assert response.status_code in (400, 404), response.text
    else:
        assert response.status_code == 400, response.text
        assert response.json()["code"] == "invalid_last_event_id"


def _id_routes(cid: int, huge: int) -> list[tuple[str, str, dict[str, object] | None]]:
    base = "/api/conversations"
    return [
        ("GET", f"{base}/{huge}", None),
        ("PATCH", f"{base}/{huge}", {"title": "x"}),
        ("DELETE", f"{base}/{huge}", None),
        ("POST", f"{base}/{huge}/fork", {}),
        ("GET", f"{base}/{huge}/messages", None),
        ("GET", f"{base}/{cid}/messages?before_message_id={huge}", None),
        ("GET", f"{base}/{huge}/export", None),
        ("POST", f"{base}/{huge}/messages", {"content": "hi"}),
        ("POST", f"{base}/{cid}/messages", {"content": "hi", "attachment_ids": [huge]}),
        ("GET", f"{base}/{cid}/attachments/{huge}/image", None),
        ("POST", f"{base}/{huge}/regenerate", None),
        ("POST", f"{base}/{huge}/stop", None),
        ("GET", f"{base}/{huge}/stream", None),
        ("GET", f"{base}/{cid}/stream?turn_id={huge}", None),
        ("GET", f"{base}/{cid}/stream?after={huge}", None),
        ("GET", f"{base}/{huge}/history", None),
        ("GET", f"{base}/{huge}/context", None),
        ("GET", f"{base}/{cid}/messages/{huge}/text", None),
        ("GET", f"{base}/{cid}/attachments/{huge}", None),
        ("GET", f"{base}/{huge}/mcp-servers", None),
        ("PUT", f"{base}/{huge}/mcp-servers", {"servers": []}),
        ("DELETE", f"/api/auth/tokens/{huge}", None),
        ("GET", f"/api/attachments/{huge}", None),
        ("GET", f"/api/attachments/{huge}/text", None),
        ("GET", f"/api/metrics/conversations/{huge}", None),
    ]


@pytest.mark.parametrize("huge", HUGE)
async def test_ids_past_their_column_are_not_found_or_invalid(alice: httpx.AsyncClient, huge: int) -> None:
    cid = await _conversation(alice)
    for method, path, body in _id_routes(cid, huge):
        response = await alice.request(method, path, json=body)
        assert response.status_code in (403, 404, 422), f"{method} {path}: {response.text}"
    page = await alice.get(f"/c/{huge}")
    assert page.status_code in (404, 422)


@pytest.mark.parametrize("ident", [*UNICODE_DIGITS, str(2**63), "-1", "x"])
async def test_forged_paging_cursors(alice: httpx.AsyncClient, ident: str) -> None:
    cursor = base64.urlsafe_b64encode(f"2026-01-01T00:00:00+00:00|{ident}".encode()).decode()
    response = await alice.get("/api/conversations", params={"cursor": cursor})
    assert response.status_code == 400 and response.json()["code"] == "invalid_cursor", response.text


@pytest.mark.parametrize("value", [*UNICODE_DIGITS, "-1", "0", str(2**63), "1e3"])
async def test_upload_form_conversation_id(alice: httpx.AsyncClient, value: str) -> None:
    response = await alice.post(
        "/api/attachments",
        content=multipart_body("a.txt", b"x", {"conversation_id": value}),
        headers={"Content-Type": CONTENT_TYPE},
    )
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "validation_error"


async def test_upload_form_conversation_id_of_another_user(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    cid = await _conversation(bob)
    _assert_client_error(await upload(alice, "a.txt", b"x", conversation_id=cid), "foreign conversation")


LONE_SURROGATE = b'"a\\ud800b"'


@pytest.mark.parametrize(
    ("method", "path", "template"),
    [
        ("POST", "/api/conversations", b'{"title": %s}'),
        ("POST", "/api/auth/register", b'{"username": %s, "password": "a long password 1"}'),
        ("POST", "/api/auth/login", b'{"username": %s, "password": "a long password 1"}'),
        ("POST", "/api/auth/tokens", b'{"name": %s}'),
        ("GET", "/api/conversations?q=%s", None),
    ],
)
async def test_lone_surrogates_are_rejected(
    alice: httpx.AsyncClient, method: str, path: str, template: bytes | None
) -> None:
    if template is None:
        # Percent-decoding replaces invalid UTF-8, so a query can only carry U+FFFD.
        response = await alice.request(method, path % "%ED%A0%80")
        assert response.status_code == 200, response.text
        return
    response = await alice.request(
        method, path, content=template % LONE_SURROGATE, headers={"Content-Type": "application/json"}
    )
    _assert_client_error(response, path)
    raw_utf8 = await alice.request(
        method, path, content=template % b'"a\xed\xa0\x80b"', headers={"Content-Type": "application/json"}
    )
    _assert_client_error(raw_utf8, path)


async def test_lone_surrogate_in_a_message_and_a_title_update(alice: httpx.AsyncClient) -> None:
    cid = await _conversation(alice)
    for method, path, template in [
        ("POST", f"/api/conversations/{cid}/messages", b'{"content": %s}'),
        ("PATCH", f"/api/conversations/{cid}", b'{"title": %s}'),
    ]:
        response = await alice.request(
            method, path, content=template % LONE_SURROGATE, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 422, response.text
    assert (await alice.get(f"/api/conversations/{cid}")).json()["title"] == "t"


async def test_oversized_json_bodies(alice: httpx.AsyncClient) -> None:
    big = json.dumps({"title": "x" * 2_000_000}).encode()
    declared = await alice.post(
        "/api/conversations", content=big, headers={"Content-Type": "application/json"}
    )
    assert declared.status_code == 413 and declared.json()["code"] == "request_too_large"

    async def chunks():  # no Content-Length: the limit applies while reading
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    streamed = await alice.post(
        "/api/conversations", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413 and streamed.json()["code"] == "request_too_large"
    assert (await alice.get("/api/conversations")).json()["items"] == []


async def _call_limit(content_length: bytes) -> tuple[int, bool]:
    """The body-size middleware on its own, with a Content-Length no HTTP parser would pass."""
    reached = False

    async def inner(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal reached
        reached = True
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "path": "/api/conversations", "headers": [(b"content-length", content_length)]}
    await BodySizeLimit(inner, max_bytes=100)(scope, receive, send)
    return sent[0]["status"], reached


@pytest.mark.parametrize(
    ("declared", "status"),
    [
        ("²".encode(), 400),
        ("١".encode(), 400),
        (b"-1", 400),
        (b"101", 413),
        (str(10**30).encode(), 413),
        (b"2", 204),
    ],
)
async def test_declared_content_length(declared: bytes, status: int) -> None:
    got, reached = await _call_limit(declared)
    assert got == status
    assert reached is (status == 204)
