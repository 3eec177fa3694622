"""History loaders (SPEC 6.2, 6.4): the model-visible history of a conversation before a message.

Both return the output of the backend's one pipeline (`backend.services.history`): package mode
calls it in-process through an injected callable; service mode reads it from
`GET /api/conversations/{id}/history` with the turn's capability. The history travels as
`ChainMessage`s whose `metadata` is the marker whitelist, so summaries, retained clones and
compact tool outputs are recognized by marker in both modes, never by their text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from chat_shell.contracts import ChainMessage, ModelHistory
from chat_shell.host.api import BackendApi

ResolveHistory = Callable[[int, int], Awaitable[list[ChainMessage]]]


class PackageHistoryLoader:
    """Calls the pipeline in this process: `resolve(conversation_id, before_message_id)`."""

    def __init__(self, resolve: ResolveHistory) -> None:
        self._resolve = resolve

    async def load(self, conversation_id: int, before_message_id: int) -> list[ChainMessage]:
        return await self._resolve(conversation_id, before_message_id)


class RemoteHistoryLoader:
    """`HistoryLoader` over `GET .../history` (from the latest compaction, before a message)."""

    def __init__(self, api: BackendApi) -> None:
        self._api = api

    async def load(self, conversation_id: int, before_message_id: int) -> list[ChainMessage]:
        data = await self._api.get(
            f"/api/conversations/{conversation_id}/history",
            before_message_id=before_message_id,
            from_latest_compaction="true",
        )
        return ModelHistory.model_validate(data).messages
