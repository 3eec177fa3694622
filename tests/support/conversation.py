"""Driving a `ChatShell` through many turns the way the backend does, without a database.

Each turn gets the model-visible history the backend's pipeline would resolve (SPEC 6.2): the
newest checkpoint chain (from its summary on) plus every later turn, where a turn contributes
its user text and its `messages_chain`. The user-visible record is kept beside it, so tests can
check that compaction never touches it. With `ahead`, each turn that was not refused is followed
by a compaction ahead of time (what the backend schedules at turn end), whose checkpoint replaces
that turn's stored chain as the backend stores it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from backend.services.records.history import checkpoint_slice
from chat_shell.contracts import (
    AheadRequest,
    ChainMessage,
    ChainMetadata,
    ContextCompactionEvent,
    TurnEvent,
    TurnResult,
)
from chat_shell.messages.convert import entry_id
from chat_shell.runtime import ChatShell
from tests.support.turns import collect, make_request

ZH_VOCABULARY = (
    "预算 订单 相机 镜头 配送 时间 价格 折扣 库存 仓库 供应商 评价 电池 传感器 重量 旅行 酒店 "
    "航班 预订 会议 报告 日志 服务 请求 响应 错误 超时 重试 缓存 队列 数据库 查询 用户 客户 "
    "账户 支付 退款 发票 比较 更新 确认 发现 应该 可以 希望 避免 包括 之前 之后 最新 方案 建议"
)


def chinese_text(chars: int, seed: int) -> str:
    """Deterministic Chinese prose of about `chars` characters (cl100k: about 1 token each)."""
    rng = random.Random(seed)
    words = ZH_VOCABULARY.split(" ")
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = "".join(rng.choices(words, k=rng.randint(5, 12))) + "。"
        out.append(sentence)
        size += len(sentence)
    return "".join(out)


@dataclass
class Conversation:
    shell: ChatShell
    conversation_id: int = 1
    # The user-visible record: (user text, assistant visible text) per turn.
    visible: list[tuple[str, str]] = field(default_factory=list)
    history: list[ChainMessage] = field(default_factory=list)
    results: list[TurnResult] = field(default_factory=list)
    events: list[list[TurnEvent]] = field(default_factory=list)
    # The turn (1-based) of the newest checkpoint, if any.
    checkpoint_turn: int | None = None
    # Compact ahead of time after each turn (as the backend does at turn end).
    ahead: bool = False
    # Each turn's stored `messages_chain` (an ahead checkpoint replaces the turn's own chain).
    stored: list[list[ChainMessage]] = field(default_factory=list)
    # The final status of each compaction made ahead of time, per turn (None: none was due).
    ahead_outcomes: list[ContextCompactionEvent | None] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return len(self.results)

    async def send(self, content: str) -> TurnResult:
        turn = self.turns + 1
        request = make_request(
            turn, content, history=list(self.history), conversation_id=self.conversation_id
        )
        events = await collect(self.shell, request)
        result = events[-1].result  # type: ignore[union-attr]
        self.events.append(events)
        self.results.append(result)
        self.visible.append((content, result.value))
        before = self.history
        self._store(turn, content, result.messages_chain)
        if self.ahead and result.termination_reason != "context_refused":
            outcome = await self.shell.compact_ahead(
                AheadRequest(
                    conversation_id=self.conversation_id,
                    owner_id=1,
                    turn_id=turn,
                    assistant_message_id=turn * 2,
                    history=list(self.history),
                    own_ids=[entry.id for entry in result.messages_chain if entry.id],
                ),
                lambda _: None,
            )
            self.ahead_outcomes.append(outcome)
            if outcome is not None and outcome.checkpoint_chain:
                self.stored.pop()
                self.history = before
                self._store(turn, content, outcome.checkpoint_chain)
        return result

    def _store(self, turn: int, content: str, chain: list[ChainMessage]) -> None:
        self.stored.append(chain)
        if any(entry.metadata.summary_compacted for entry in chain):
            self.history = checkpoint_slice(chain)
            self.checkpoint_turn = turn
        else:
            self.history = [*self.history, self.user_entry(turn, content), *chain]

    def user_entry(self, turn: int, content: str) -> ChainMessage:
        """The user row as the backend's history pipeline returns it."""
        message_id = turn * 2 - 1
        return ChainMessage(
            role="user",
            content=content,
            id=entry_id("user", self.conversation_id, message_id),
            metadata=ChainMetadata(
                source_conversation_id=self.conversation_id,
                source_message_id=message_id,
                source_status="completed",
            ),
        )
