"""GET requests to the backend's HTTP API with one turn's capability (service mode).

A 404 becomes `LookupError` carrying the backend's message (what the package-mode readers
raise), so the model reads the same words in both modes; any other failure is
`BackendUnavailable`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from chat_shell.contracts import MAX_TEXT_PAGE_CHARS, AttachmentPage, BackendAccess, OriginalText

PageT = TypeVar("PageT", AttachmentPage, OriginalText)


class BackendUnavailable(Exception):
    """The backend refused (other than 404) or did not answer."""


class BackendApi:
    """GET requests to the backend with one turn's capability."""

    def __init__(self, client: httpx.AsyncClient, access: BackendAccess) -> None:
        self._client = client
        self._base = access.base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {access.capability}"}

    async def get(self, path: str, **params: Any) -> Any:
        query = {key: value for key, value in params.items() if value is not None}
        try:
            response = await self._client.get(f"{self._base}{path}", params=query, headers=self._headers)
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"the backend did not answer: {type(exc).__name__}") from exc
        if response.status_code == 200:
            return response.json()
        message = _message(response)
        if response.status_code == 404:
            raise LookupError(message)
        raise BackendUnavailable(f"the backend answered {response.status_code}: {message}")


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


async def read_pages(fetch: Callable[[int, int], Awaitable[PageT]], offset: int, limit_chars: int) -> PageT:
    """Up to `limit_chars` characters from `offset` as one page, fetched in pieces the API serves."""
    page = await fetch(offset, min(limit_chars, MAX_TEXT_PAGE_CHARS))
    while page.has_more and len(page.text) < limit_chars:
        more = await fetch(page.next_offset, min(limit_chars - len(page.text), MAX_TEXT_PAGE_CHARS))
        page = page.model_copy(
            update={"text": page.text + more.text, "next_offset": more.next_offset, "has_more": more.has_more}
        )
    return page
