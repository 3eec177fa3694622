"""The summarizer model call of summary compaction: the turn's provider, non-streaming."""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langgraph.constants import TAG_NOSTREAM


class ModelSummarizer:
    """`Summarizer` over a chat model (its own timeout is the provider timeout; the compaction
    stage adds an `asyncio.wait_for` backstop)."""

    def __init__(self, model: BaseChatModel) -> None:
        self._model = model

    async def __call__(self, messages: list[BaseMessage]) -> str:
        # Tagged so the summary's tokens never appear in the turn's message stream.
        reply = await self._model.ainvoke(messages, config={"tags": [TAG_NOSTREAM]})
        return reply.text.strip()
