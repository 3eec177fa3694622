"""Service mode's host (SPEC 6.4): per turn, clients of the backend that sent the request.

Each request carries `BackendAccess`: the backend's base URL and a capability scoped to the
turn's conversation. One pooled `httpx.AsyncClient` serves every turn; the clients built per
turn only hold the access.
"""

from __future__ import annotations

import httpx

from chat_shell.contracts import (
    AttachmentImage,
    AttachmentPage,
    AttachmentRef,
    ChainMessage,
    ModelHistory,
    OriginalsPage,
    OriginalText,
    TurnRequest,
)
from chat_shell.host import TurnServices
from chat_shell.host.api import BackendApi, read_pages


class RemoteHistoryLoader:
    """`HistoryLoader` over `GET .../history`: the output of the backend's one history pipeline
    (SPEC 6.2), from the latest compaction, before a message. The entries carry their markers
    in `metadata`, so summaries and retained clones are recognized as in package mode."""

    def __init__(self, api: BackendApi) -> None:
        self._api = api

    async def load(self, conversation_id: int, before_message_id: int) -> list[ChainMessage]:
        data = await self._api.get(
            f"/api/conversations/{conversation_id}/history",
            before_message_id=before_message_id,
            from_latest_compaction="true",
        )
        return ModelHistory.model_validate(data).messages


class RemoteHistoryBrowser:
    """`HistoryBrowser` over `GET .../messages/outline` and `.../messages/{id}/text`."""

    def __init__(self, api: BackendApi) -> None:
        self._api = api

    async def outline(self, conversation_id: int, before_message_id: int | None, limit: int) -> OriginalsPage:
        data = await self._api.get(
            f"/api/conversations/{conversation_id}/messages/outline",
            before_message_id=before_message_id,
            limit=limit,
        )
        return OriginalsPage.model_validate(data)

    async def read(
        self, conversation_id: int, message_id: int, offset: int, limit_chars: int
    ) -> OriginalText:
        path = f"/api/conversations/{conversation_id}/messages/{message_id}/text"

        async def fetch(start: int, chars: int) -> OriginalText:
            return OriginalText.model_validate(await self._api.get(path, offset=start, limit=chars))

        return await read_pages(fetch, offset, limit_chars)


class RemoteAttachmentReader:
    """`AttachmentReader` over `GET .../attachments/{id}`, `.../text` and `.../image`."""

    def __init__(self, api: BackendApi) -> None:
        self._api = api

    async def describe(self, conversation_id: int, attachment_id: int) -> AttachmentRef:
        data = await self._api.get(f"/api/conversations/{conversation_id}/attachments/{attachment_id}")
        return AttachmentRef.model_validate(data)

    async def read(
        self, conversation_id: int, attachment_id: int, offset: int, limit_chars: int
    ) -> AttachmentPage:
        if offset < 0 or limit_chars < 0:
            raise ValueError("offset and limit must not be negative")
        path = f"/api/conversations/{conversation_id}/attachments/{attachment_id}/text"

        async def fetch(start: int, chars: int) -> AttachmentPage:
            return AttachmentPage.model_validate(await self._api.get(path, offset=start, limit=chars))

        return await read_pages(fetch, offset, limit_chars)

    async def tail(self, conversation_id: int, attachment_id: int, chars: int) -> str:
        total = (await self.describe(conversation_id, attachment_id)).extracted_chars
        start = max(0, total - max(0, chars))
        return (await self.read(conversation_id, attachment_id, start, total - start)).text

    async def image(self, conversation_id: int, attachment_id: int) -> AttachmentImage:
        data = await self._api.get(f"/api/conversations/{conversation_id}/attachments/{attachment_id}/image")
        return AttachmentImage.model_validate(data)


class RemoteHost:
    """Service mode's host: per turn, clients of the backend that sent the request."""

    def __init__(self, *, timeout: float = 30.0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._client = httpx.AsyncClient(timeout=timeout, transport=transport)

    def services(self, request: TurnRequest) -> TurnServices:
        if request.backend is None:
            return TurnServices()
        api = BackendApi(self._client, request.backend)
        return TurnServices(
            history=RemoteHistoryLoader(api),
            attachments=RemoteAttachmentReader(api),
            originals=RemoteHistoryBrowser(api),
        )

    async def aclose(self) -> None:
        await self._client.aclose()
