"""What a user does on the chat page, as small helpers over Playwright's sync API."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import httpx
from playwright.sync_api import Locator, Page, expect

from backend.api.deps import SESSION_COOKIE
from chat_shell.accounting.budget import PRE_TRIGGER_SHARE
from tests.support.browser import Stack, api_client, assistant


def start(page: Page, stack: Stack, username: str, path: str = "/", *, register: bool = True) -> httpx.Client:
    """Registers (unless the account exists) and logs in `username` through the API, gives the
    browser that session (the login form has its own tests), opens `path`, and returns the API
    client."""
    client = api_client(stack.base_url, username, register=register)
    page.context.add_cookies(
        [
            {
                "name": cookie.name,
                "value": cookie.value or "",
                "url": stack.base_url,
                "httpOnly": cookie.name == SESSION_COOKIE,
                "sameSite": "Lax",
            }
            for cookie in client.cookies.jar
        ]
    )
    page.goto(f"{stack.base_url}{path}")
    return client


def composer(page: Page) -> Locator:
    return page.get_by_label("Message", exact=True)


def send(page: Page, text: str) -> None:
    """Types and sends a message (Enter, or the Send button on a touch screen); returns once its
    reply has appeared (running or not)."""
    replies = page.locator(".msg.assistant")
    before = replies.count()
    composer(page).fill(text)
    if page.evaluate("matchMedia('(pointer: coarse)').matches"):
        page.get_by_role("button", name="Send").click()  # on a touch screen Enter adds a line
    else:
        composer(page).press("Enter")
    expect(replies).to_have_count(before + 1)


def conversation_actions(page: Page) -> Locator:
    """The open conversation's header actions (Instructions, Share, Export, ...), shown: on a
    narrow screen they are behind the header's menu button, which this opens."""
    menu = page.get_by_role("button", name="Conversation actions")
    if menu.is_visible() and menu.get_attribute("aria-expanded") != "true":
        menu.click()
    actions = page.locator("#header-actions")
    expect(actions).to_be_visible()
    return actions


def last_assistant(page: Page) -> Locator:
    return page.locator(".msg.assistant").last


def wait_finished(page: Page, status: str = "completed", timeout: float = 20_000) -> Locator:
    reply = last_assistant(page)
    expect(reply).to_have_attribute("data-status", status, timeout=timeout)
    expect(page.locator("#stop")).to_be_hidden()
    return reply


def conversation_id(page: Page) -> int:
    match = re.search(r"/c/(\d+)$", page.url)
    assert match, page.url
    return int(match.group(1))


def stored(client: httpx.Client, cid: int, limit: int = 200) -> list[dict[str, Any]]:
    response = client.get(f"/api/conversations/{cid}/messages", params={"limit": limit})
    assert response.status_code == 200, response.text
    return response.json()["items"]


def stored_text(message: dict[str, Any]) -> str:
    """The reply text as streamed: its text blocks, in order, without separators."""
    return "".join(b["text"] for b in message["result"]["blocks"] if b["type"] == "text")


def streamed_text(page: Page, message_id: int) -> str:
    return page.evaluate("(id) => window.chatShell.streamedText(id)", message_id)


def meter_used(page: Page) -> int:
    """The meter's used input tokens, as shown."""
    value = page.locator("#context-meter [role=meter]").get_attribute("aria-valuenow")
    assert value is not None
    return int(value)


def ahead_trigger(page: Page) -> int:
    """The pre-trigger of compaction ahead of time, at the default share of the shown trigger."""
    trigger = int(page.locator("#context-meter .meter-trigger").get_attribute("data-trigger") or 0)
    return int(trigger * PRE_TRIGGER_SHARE)


def metrics(used: int, state: str, phase: str = "final", **extra: Any) -> dict[str, Any]:
    """A stored final (or live) context snapshot of the 8k test window, for seeded replies."""
    window, reserved = 8192, 4096
    available = window - reserved
    return {
        "phase": phase,
        "profile": "gpt-4o-mini",
        "profile_source": "configured",
        "context_window": window,
        "reserved_output": reserved,
        "available_input": available,
        "used_input": used,
        "remaining": available - used,
        "remaining_percent": round((available - used) / available * 100, 1),
        "trigger": 3481,
        "keep": 1843,
        "over_trigger": used >= 3481,
        "state": state,
        "breakdown": {
            "system": 300,
            "tool_schemas": 118,
            "history": max(0, used - 300 - 118 - 40 - (600 if state == "compacted" else 0)),
            "tool_outputs": 0,
            "attachments": 0,
            "summary": 600 if state == "compacted" else 0,
            "current_input": 40,
        },
        **extra,
    }


def compaction_record(status: str, **extra: Any) -> dict[str, Any]:
    """A summary compaction's record at the 8k test window's trigger, as streamed and stored."""
    return {
        "strategy": "summary_compact",
        "status": status,
        "before_tokens": 3600,
        "trigger": 3481,
        "keep": 1843,
        "created_at": datetime.now(UTC).isoformat(),
        **extra,
    }


def compacted_reply(text: str, done: dict[str, Any]) -> dict[str, Any]:
    """A seeded reply whose turn compacted (`done`), the meter compacted at 1,700 tokens after it."""
    return assistant(
        text, context_compactions=[done], context_metrics=metrics(1700, "compacted", latest_compaction=done)
    )
