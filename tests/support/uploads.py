"""Upload helpers: multipart bodies built byte by byte (so names may hold any byte) and sent
whole or as a chunked stream without a Content-Length."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

BOUNDARY = "chatshelltestboundary7MA4YWxkTrZu0gW"


def multipart_body(filename: bytes | str, data: bytes, fields: dict[str, str] | None = None) -> bytes:
    raw_name = filename.encode() if isinstance(filename, str) else filename
    parts = []
    for name, value in (fields or {}).items():
        parts.append(
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        )
    parts.append(
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="'.encode()
        + raw_name
        + b'"\r\nContent-Type: application/octet-stream\r\n\r\n'
        + data
        + b"\r\n"
    )
    parts.append(f"--{BOUNDARY}--\r\n".encode())
    return b"".join(parts)


CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"


async def upload(
    client: httpx.AsyncClient,
    filename: bytes | str,
    data: bytes,
    *,
    conversation_id: int | None = None,
    chunked: bool = False,
) -> httpx.Response:
    fields = {"conversation_id": str(conversation_id)} if conversation_id is not None else None
    body = multipart_body(filename, data, fields)
    if not chunked:
        return await client.post("/api/attachments", content=body, headers={"Content-Type": CONTENT_TYPE})

    async def stream() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    return await client.post("/api/attachments", content=stream(), headers={"Content-Type": CONTENT_TYPE})


async def upload_ok(client: httpx.AsyncClient, filename: bytes | str, data: bytes, **kwargs: object) -> dict:
    response = await upload(client, filename, data, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == 201, response.text
    return response.json()
