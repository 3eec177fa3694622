"""The scripted provider also runs as its own process, scripted over HTTP (for benchmarks)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from langchain_openai import ChatOpenAI

from tests.support.scripted_provider import count_prompt_tokens, process_command, text
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def provider_process() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(process_command(port, "--hidden-overhead", "7"), cwd=ROOT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


async def _wait_until_up(client: httpx.AsyncClient) -> None:
    for _ in range(200):
        try:
            await client.post("/_reset")
            return
        except httpx.ConnectError:
            await asyncio.sleep(0.05)
    raise AssertionError("the scripted provider process did not start")


async def test_a_separate_process_is_scripted_and_recorded_over_http(provider_process: str) -> None:
    async with httpx.AsyncClient(base_url=provider_process) as client:
        await _wait_until_up(client)
        await client.post("/_script", json=[text("from another process").model_dump()])
        model = ChatOpenAI(model="m", base_url=f"{provider_process}/v1", api_key="k", stream_usage=True)
        chunks = [chunk async for chunk in model.astream("hi there")]
        reply = "".join(str(chunk.content) for chunk in chunks)
        usage = next(chunk.usage_metadata for chunk in chunks if chunk.usage_metadata)
        [request] = (await client.get("/_requests")).json()
    assert reply == "from another process"
    assert request["messages"] == [{"role": "user", "content": "hi there"}]
    assert usage["input_tokens"] == count_prompt_tokens(request) + 7
