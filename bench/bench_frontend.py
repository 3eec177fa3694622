"""The browser UI under load (issue 9), measured in headless Chromium against the real backend.

1. Opening a conversation: time from navigation start to the newest page of messages in the
   DOM (the page's `chat:first-page` mark), for 2,000 messages versus 20. Target: within 2x.
2. Streaming: while a reply of about 2,000 tokens streams in, the time from each SSE event's
   receipt (`event.timeStamp`) to the end of its DOM update, as recorded by the page.
   Target: p95 under 50 ms.

`python -m bench.bench_frontend [--quick]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

from bench.common import row
from tests.support import databases
from tests.support.browser import (
    Stack,
    api_client,
    assistant,
    launch_chromium,
    seed_conversation,
    serve_stack,
    user,
)
from tests.support.scripted_provider import iter_tokens, text

ROOT = Path(__file__).resolve().parent.parent
USERNAME = "benchuser"
PARAGRAPH = (
    "The **context window** is governed before every model call; older turns are summarized "
    "while the user keeps every original message. See `read_message` for details."
)
CODE = "```python\ndef plan(days: int) -> list[str]:\n    return [f'day {n}' for n in range(days)]\n```"


def conversation(size: int) -> list[dict[str, Any]]:
    """Alternating questions and Markdown answers (paragraphs, lists, code, a tool call)."""
    messages: list[dict[str, Any]] = []
    for n in range(size):
        if n % 2 == 0:
            messages.append(user(f"Question {n}: how does the plan for day {n} look?"))
            continue
        answer = f"{PARAGRAPH}\n\n- first {n}\n- second {n}\n\n{CODE}" if n % 4 == 1 else PARAGRAPH
        tool = {
            "type": "tool",
            "call_id": f"call_{n}",
            "name": "generate_report",
            "args": {"rows": 2},
            "output": "order_id | amount\nORD-1 | 10.00\ntotal rows: 1",
            "status": "completed",
        }
        message = assistant(answer)
        if n % 6 == 3:
            message["result"]["blocks"].insert(0, tool)
        messages.append(message)
    return messages


def reply_text(tokens: int) -> str:
    """A Markdown reply of about `tokens` cl100k tokens."""
    parts: list[str] = []
    while len(list(iter_tokens("\n\n".join(parts)))) < tokens:
        n = len(parts)
        parts.append(CODE if n % 5 == 4 else f"{n}. {PARAGRAPH} Item *{n}* has `{n * 7}` units.")
    return "\n\n".join(parts)


def wait_for(page: Page, expression: str, timeout: float = 60.0) -> Any:
    """Polls a page expression (the page's CSP forbids the string eval `wait_for_function` uses)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = page.evaluate(expression)
        if value:
            return value
        time.sleep(0.005)
    raise TimeoutError(expression)


def open_time_ms(page: Page, stack: Stack, cid: int) -> float:
    page.goto(f"{stack.base_url}/c/{cid}")
    return float(wait_for(page, "() => window.chatShell && window.chatShell.firstPageMs"))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def run(quick: bool) -> bool:
    repeat = 3 if quick else 9
    stream_tokens = 500 if quick else 2000
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        url = databases.sqlite_copy(databases.sqlite_template(work), work)
        with serve_stack(url, work / "data") as stack:
            client = api_client(stack.base_url, USERNAME)
            small = seed_conversation(url, USERNAME, "Twenty messages", conversation(20))
            large = seed_conversation(url, USERNAME, "Two thousand messages", conversation(2000))
            with sync_playwright() as playwright:
                browser = launch_chromium(playwright)
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                context.add_cookies(
                    [
                        {"name": c.name, "value": c.value or "", "url": stack.base_url}
                        for c in client.cookies.jar
                    ]
                )
                page = context.new_page()
                open_time_ms(page, stack, small)  # warm the static files and the server
                open_time_ms(page, stack, large)
                times: dict[int, list[float]] = {small: [], large: []}
                for _ in range(repeat):
                    for cid in (small, large):
                        times[cid].append(open_time_ms(page, stack, cid))
                rendered = page.locator(".msg").count()
                small_ms, large_ms = statistics.median(times[small]), statistics.median(times[large])
                ratio = large_ms / small_ms

                reply = reply_text(stream_tokens)
                stack.provider.script(text(reply, token_delay=0.004))
                cid = client.post("/api/conversations", json={"title": "Streaming"}).json()["id"]
                page.goto(f"{stack.base_url}/c/{cid}")
                wait_for(page, "() => window.chatShell && window.chatShell.firstPageMs")
                page.evaluate("() => { window.chatShell.eventToDom.length = 0; }")
                page.get_by_label("Message", exact=True).fill("Stream a long plan")
                page.keyboard.press("Enter")
                wait_for(page, "() => document.querySelector('.msg.assistant[data-status=completed]')")
                latencies: list[float] = page.evaluate("() => window.chatShell.eventToDom")
                streamed = page.evaluate("() => window.chatShell.streamedText(2)")
                browser.close()

    row("open a conversation (first page rendered)", "median ms", "runs")
    row("  20 messages", f"{small_ms:.1f}", repeat)
    row(f"  2,000 messages ({rendered} rendered)", f"{large_ms:.1f}", repeat)
    row("  ratio 2,000 / 20", f"{ratio:.2f}x")
    p50, p95 = percentile(latencies, 0.5), percentile(latencies, 0.95)
    row(f"stream {stream_tokens} tokens ({len(latencies)} events)", "p50 ms", "p95 ms", "max ms")
    row("  event receipt -> DOM updated", f"{p50:.2f}", f"{p95:.2f}", f"{max(latencies):.2f}")
    exact = streamed == reply
    print(f"streamed text equals the scripted reply: {exact}")
    ok = ratio <= 2.0 and p95 < 50.0 and exact
    print(f"targets: open ratio <= 2x, stream p95 < 50 ms -> {'met' if ok else 'NOT met'}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT / ".cache" / "tiktoken"))
    if not run(parser.parse_args().quick):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
