"""Invariant 6 over the whole stack, in package and in service mode: after a compaction in turn
K, every later turn N sends the model exactly the checkpoint of K, the chains of turns
K+1..N-1 and the new input, byte for byte, and both modes send the same bytes."""

from __future__ import annotations

import json
from typing import Any

from langchain_openai.chat_models.base import _convert_message_to_dict

from chat_shell.contracts import ChainMessage
from chat_shell.messages.convert import to_langchain
from tests.support.modes import Mode, OpenModes
from tests.support.scripted_provider import ScriptedProvider, is_summary_request
from tests.support.texts import SMALL_COMPACTION, WORDS

# Compaction ahead of time runs in package mode only: both modes compact inside the turn.
COMPACTING = {**SMALL_COMPACTION, "compaction_ahead": False}


async def _conversation(mode: Mode, provider: ScriptedProvider) -> list[dict[str, Any]]:
    """Turns until two after the first compaction: per turn, the history the backend would
    resolve before it, what was sent, and the requests it caused."""
    cid = (await mode.client.post("/api/conversations", json={"title": "long"})).json()["id"]
    turns: list[dict[str, Any]] = []
    compacted_at: int | None = None
    for n in range(12):
        if compacted_at is not None and n > compacted_at + 2:
            break
        history = await mode.client.get(
            f"/api/conversations/{cid}/history", params={"from_latest_compaction": "true"}
        )
        content = f"Turn {n}: " + WORDS * 60
        sent = len(provider.requests)
        response = await mode.client.post(
            f"/api/conversations/{cid}/messages", json={"content": content}, params={"wait": "true"}
        )
        assert response.json()["assistant_message"]["status"] == "completed", (mode.name, response.text)
        requests = provider.requests[sent:]
        if compacted_at is None and any(is_summary_request(r) for r in requests):
            compacted_at = n
        turns.append({"history": history.json()["messages"], "content": content, "requests": requests})
    assert compacted_at is not None, f"{mode.name}: no compaction"
    return [{**turn, "after_compaction": i > compacted_at} for i, turn in enumerate(turns)]


async def test_turns_after_a_compaction_send_the_checkpoint_and_later_chains_in_both_modes(
    open_modes: OpenModes, scripted_provider: ScriptedProvider
) -> None:
    async with open_modes(**COMPACTING) as modes:
        package = await _conversation(modes.package, scripted_provider)
        service = await _conversation(modes.service, scripted_provider)
    later = [turn for turn in package if turn["after_compaction"]]
    assert len(later) == 2
    for turn in later:
        assert turn["history"][0]["metadata"]["summary_compacted"] is True
        expected = [
            _convert_message_to_dict(to_langchain(ChainMessage.model_validate(e))) for e in turn["history"]
        ]
        expected.append({"role": "user", "content": turn["content"]})
        first = next(r for r in turn["requests"] if not is_summary_request(r))
        assert first["messages"] == expected
    # Both placements send the model the same bytes on every call, summaries included.
    assert [json.dumps(t["requests"], sort_keys=True) for t in package] == [
        json.dumps(t["requests"], sort_keys=True) for t in service
    ]
