"""Driving a `ChatShell` through many turns the way the backend does, without a database.

Each turn gets the model-visible history the backend's pipeline would resolve (SPEC 6.2): the
newest checkpoint chain (from its summary on) plus every later turn, where a turn contributes
its user text and its `messages_chain`. The user-visible record is kept beside it, so tests can
check that compaction never touches it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from chat_shell.contracts import ChainMessage, ChainMetadata, TurnEvent, TurnResult
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


def checkpoint_slice(chain: list[ChainMessage]) -> list[ChainMessage] | None:
    for index in range(len(chain) - 1, -1, -1):
        if chain[index].metadata.summary_compacted:
            return chain[index:]
    return None


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
        checkpoint = checkpoint_slice(result.messages_chain)
        if checkpoint is not None:
            self.history = checkpoint
            self.checkpoint_turn = turn
        else:
            self.history = [*self.history, self.user_entry(turn, content), *result.messages_chain]
        return result

    def user_entry(self, turn: int, content: str) -> ChainMessage:
        """The user row as the backend's history pipeline returns it."""
        message_id = turn * 2 - 1
        return ChainMessage(
            role="user",
            content=content,
            id=f"u{self.conversation_id}-{message_id}",
            metadata=ChainMetadata(
                source_conversation_id=self.conversation_id,
                source_message_id=message_id,
                source_status="completed",
            ),
        )
