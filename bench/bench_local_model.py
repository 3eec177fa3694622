"""The embedded local model (issue 11): repeat-run startup and throughput on this machine.

- install check: what `chat-shell serve` spends on the local model's installation when it is
  already installed (the repeat-run case; the one-time wheel build is reported by the installer);
- server start: the llama.cpp server from spawn to a healthy `/v1/models`;
- repeat run: `chat-shell serve --migrate` on a new data dir, from spawn to the chat page
  answering 200 with the local model up (target: at most 20 s);
- throughput: completion tokens per second of SmolLM2-135M (non-streamed, usage-reported), the
  time to the first streamed token, and prompt tokens evaluated per second for a ~2.8k-token
  prompt (what a summary of a full 4096-token window costs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from backend.local_model.installer import ensure_installed, server_installed
from backend.local_model.model_file import resolve_model_file
from backend.local_model.supervisor import LocalModelServer, ServerOptions, free_port
from bench.common import row
from chat_shell.providers.profiles import LOCAL_MODEL_NAME

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Write a short paragraph about lighthouses."


def _delta_text(line: str) -> str:
    if not line.startswith("data: {"):
        return ""
    choices = json.loads(line.removeprefix("data: "))["choices"]
    return (choices[0]["delta"].get("content") or "") if choices else ""


async def _throughput(server: LocalModelServer, runs: int, max_tokens: int) -> tuple[float, float]:
    rates, first_tokens = [], []
    async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as client:
        body = {
            "model": LOCAL_MODEL_NAME,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens,
            "temperature": 0.7,
        }
        await client.post("/chat/completions", json=body)  # warm-up
        for _ in range(runs):
            start = time.perf_counter()
            answer = (await client.post("/chat/completions", json=body)).json()
            rates.append(answer["usage"]["completion_tokens"] / (time.perf_counter() - start))
            start = time.perf_counter()
            async with client.stream("POST", "/chat/completions", json={**body, "stream": True}) as stream:
                async for line in stream.aiter_lines():
                    if _delta_text(line):
                        first_tokens.append(time.perf_counter() - start)
                        break
    return statistics.median(rates), statistics.median(first_tokens)


async def _prompt_rate(server: LocalModelServer, sentences: int) -> tuple[int, float]:
    """Prompt tokens evaluated per second for a long, uncached prompt (what a summary costs)."""
    text = " ".join(
        f"Entry {i}: the ferry carried {40 + 7 * i} passengers to the island." for i in range(sentences)
    )
    body = {"model": LOCAL_MODEL_NAME, "messages": [{"role": "user", "content": text}], "max_tokens": 1}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=600) as client:
        start = time.perf_counter()
        answer = (await client.post("/chat/completions", json=body)).json()
    prompt = answer["usage"]["prompt_tokens"]
    return prompt, prompt / (time.perf_counter() - start)


async def _server(runs: int, max_tokens: int, *, quick: bool) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        options = ServerOptions(resolve_model_file(), log_path=Path(scratch) / "server.log")
        server = LocalModelServer(options)
        start = time.perf_counter()
        await server.start()
        row("server start to healthy (s)", f"{time.perf_counter() - start:.2f}")
        try:
            rate, first = await _throughput(server, runs, max_tokens)
            prompt, prompt_rate = await _prompt_rate(server, 40 if quick else 170)
        finally:
            await server.stop()
    row(f"throughput, {max_tokens} tokens (tokens/s)", f"{rate:.1f}")
    row("time to first streamed token (s)", f"{first:.2f}")
    row(f"prompt evaluation, {prompt} tokens (tokens/s)", f"{prompt_rate:.1f}")


def _repeat_run() -> float:
    """`chat-shell serve --migrate` with nothing configured, until the chat page answers."""
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")},
            "CHAT_SHELL_DATA_DIR": str(Path(scratch) / "data"),
            "CHAT_SHELL_LOCAL_MODEL": "auto",
            "PYTHONPATH": str(ROOT),
        }
        start = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "backend.cli", "serve", "--migrate", "--port", str(port)],
            cwd=scratch,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while time.perf_counter() - start < 120:
                if process.poll() is not None:
                    raise SystemExit("chat-shell serve exited during startup")
                try:
                    if (
                        httpx.get(f"http://127.0.0.1:{port}/", timeout=1, follow_redirects=True).status_code
                        == 200
                    ):
                        return time.perf_counter() - start
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            raise SystemExit("the chat page did not answer within 120 s")
        finally:
            process.terminate()
            process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if not server_installed():
        raise SystemExit("the local model is not installed: run `chat-shell local-model install`")
    start = time.perf_counter()
    ensure_installed(lambda _: None)
    row("install check, already installed (s)", f"{time.perf_counter() - start:.2f}")
    asyncio.run(_server(runs=1 if args.quick else 3, max_tokens=64 if args.quick else 128, quick=args.quick))
    repeat = _repeat_run()
    row("repeat run to the chat page (s)", f"{repeat:.2f}", f"{repeat / 20:.2f}x of 20 s")


if __name__ == "__main__":
    main()
