"""The summarizer model call of summary compaction: the turn's provider, streamed so that a
summary that starts to loop is cut there (`chat_shell.providers.repetition`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, BaseMessageChunk
from langgraph.constants import TAG_NOSTREAM

from chat_shell.providers.repetition import loop_start

log = logging.getLogger(__name__)


class ModelSummarizer:
    """`Summarizer` over a chat model (its own timeout is the provider timeout; the compaction
    stage adds an `asyncio.wait_for` backstop)."""

    def __init__(self, model: BaseChatModel) -> None:
        self._model = model

    async def __call__(self, messages: list[BaseMessage]) -> str:
        text = ""
        # Tagged so the summary's tokens never appear in the turn's message stream. Closing the
        # stream early closes the request, and the provider stops writing the loop.
        stream = self._model.astream(messages, config={"tags": [TAG_NOSTREAM]})
        async with aclosing(cast(AsyncGenerator[BaseMessageChunk, None], stream)) as chunks:
            async for chunk in chunks:
                text += chunk.text
                if "\n" in chunk.text and (start := loop_start(text)) is not None:
                    log.info("the summary began repeating itself after %d characters: cut there", start)
                    return text[:start].strip()
        return text.strip()
