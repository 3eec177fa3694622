"""The page in the user's language (issue 24), in Chromium: a browser that asks for Chinese gets
the chat page (meter and its breakdown, a compaction boundary, a refused message), the
dashboard, the users page and the account page in Chinese with no English left; a language
picked on the account page is the account's from the next page on, whatever the browser asks;
plural forms follow the language ("1 other session" / "2 other sessions"; one form in Chinese)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from babel.messages.pofile import read_po
from playwright.sync_api import Browser, Page, expect

from tests.frontend.actions import compacted_reply, compaction_record, start
from tests.frontend.conftest import ROOT, open_page, screenshot
from tests.support.api import PASSWORD, make_operator
from tests.support.browser import Stack, assistant, run_off_loop, seed_conversation, user
from tests.support.scripted_provider import text

pytestmark = pytest.mark.browser

LOCALES = ROOT / "frontend" / "locale"
CHINESE = {"locale": "zh-CN", "extra_http_headers": {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"}}
ENGLISH = {"locale": "en-US", "extra_http_headers": {"Accept-Language": "en-US,en;q=0.9"}}
REFUSAL = {
    "code": "context_refused",
    "message": "Your message alone has 9,000 tokens; the model takes 4,096 tokens of input.",
}


@pytest.fixture
def zh_page(browser: Browser, stack: Stack) -> Iterator[Page]:
    yield from open_page(browser, stack, viewport={"width": 1280, "height": 860}, **CHINESE)


@pytest.fixture
def en_page(browser: Browser, stack: Stack) -> Iterator[Page]:
    yield from open_page(browser, stack, viewport={"width": 1280, "height": 860}, **ENGLISH)


def _english_phrases() -> list[str]:
    """The English words of every message Chinese says differently: each message's longest
    stretch between placeholders and markup, when it has at least two words."""
    with (LOCALES / "zh_CN" / "LC_MESSAGES" / "messages.po").open("rb") as handle:
        chinese = {m.id if isinstance(m.id, str) else m.id[0]: m.string for m in read_po(handle) if m.id}
    phrases = set()
    for message, translation in chinese.items():
        if message == translation:
            continue
        parts = re.split(r"\{\w+\}|%\(\w+\)s|<[^>]+>|&\w+;", message)
        longest = max((part.strip(" .,:;·()") for part in parts), key=len)
        if len(longest.split()) >= 2:
            phrases.add(longest)
    return sorted(phrases)


def assert_no_english(page: Page) -> None:
    """No English message of the catalog anywhere in the page: its text, and what screen
    readers and tooltips say."""
    shown = page.evaluate(
        """() => {
          const said = ["aria-label", "title", "placeholder"];
          const labelled = [...document.querySelectorAll("[aria-label],[title],[placeholder]")];
          const attributes = labelled.flatMap((el) => said.map((name) => el.getAttribute(name) ?? ""));
          return [document.body.innerText, document.title, ...attributes].join("\\n");
        }"""
    )
    left = [phrase for phrase in _english_phrases() if phrase in shown]
    assert not left, f"English left on the Chinese page: {left}"


def _seed_compacted_then_refused(stack: Stack, username: str) -> int:
    done = compaction_record("completed", after_tokens=1500, summary_text="用户计划四月去京都玩五天。")
    turns: list[dict[str, Any]] = []
    for n in range(3):
        turns += [user(f"关于京都的问题 {n}"), assistant(f"关于京都的回答 {n}。")]
    refused = {
        "role": "assistant",
        "status": "failed",
        "result": {"value": "", "blocks": [], "error": REFUSAL},
    }
    return seed_conversation(
        stack.database_url,
        username,
        "京都之行",
        [
            *turns,
            user("茶道呢？"),
            compacted_reply("第三天去体验茶道。", done),
            user("很长的消息"),
            refused,
        ],
    )


def test_the_chat_page_in_chinese(zh_page: Page, stack: Stack, username: str) -> None:
    page = zh_page
    start(page, stack, username)
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(page.get_by_role("button", name="新对话")).to_be_visible()
    expect(page.get_by_label("消息", exact=True)).to_have_attribute("placeholder", re.compile("Enter 发送"))
    cid = _seed_compacted_then_refused(stack, username)
    page.goto(f"{stack.base_url}/c/{cid}")

    boundary = page.locator(".boundary")
    expect(boundary).to_contain_text("早先的消息已压缩为摘要")
    expect(boundary).to_contain_text("（3,600 → 1,500 个 token）")
    # The refusal is said by its code, in Chinese, not in the server's English words.
    note = page.locator(".msg.assistant").last.locator(".msg-note")
    expect(note).to_contain_text("回复失败：即使把之前的消息压缩成摘要")
    expect(note).not_to_contain_text("tokens")

    meter = page.locator("#context-meter")
    expect(meter).to_have_attribute("data-state", "compacted")
    expect(meter.locator(".meter-left")).to_have_text("剩余 59%")
    page.locator("#context-meter .meter-button").focus()
    details = page.locator("#meter-details")
    expect(details).to_be_visible()
    expect(details).to_contain_text("早先的消息已压缩为摘要")
    expect(details.locator('tr[data-source="history"] th')).to_have_text("对话历史")
    expect(details.locator('tr[data-source="summary"] th')).to_have_text("早先轮次的摘要")
    expect(details).to_contain_text("输入 1,700 / 4,096 个 token；窗口 8,192")
    assert_no_english(page)
    screenshot(page, "chat-zh-CN")


def test_the_dashboard_and_the_users_page_in_chinese(zh_page: Page, stack: Stack, username: str) -> None:
    page = zh_page
    client = start(page, stack, username)
    run_off_loop(make_operator(stack.database_url, username))
    chat = client.post("/api/conversations", json={"title": "发布"}).json()["id"]
    stack.provider.script(text("第一个回答。"))
    response = client.post(
        f"/api/conversations/{chat}/messages", json={"content": "这次发布改了什么？"}, params={"wait": "true"}
    )
    assert response.status_code == 200, response.text
    page.goto(f"{stack.base_url}/operators?window=1h")
    expect(page.locator("#dashboard")).to_have_attribute("data-loaded", "true")
    expect(page.get_by_role("heading", name="上下文仪表盘")).to_be_visible()
    expect(page.locator("#tiles")).to_contain_text("轮次")
    expect(page.locator("#pressure-table thead")).to_contain_text("已用 / 可用")
    page.locator("#pressure-table tbody tr").first.click()
    expect(page.locator("#drill")).to_have_attribute("data-loaded", "true")
    expect(page.locator("#drill-title")).to_have_text(re.compile(r"^对话 #\d+$"))
    # The context state in the meter's own words, not the raw state name.
    expect(page.locator("#drill-tiles")).to_contain_text(
        re.compile("空间充足|接近压缩阈值|早先的消息已压缩为摘要|消息超出了模型的上下文长度")
    )
    assert_no_english(page)
    screenshot(page, "dashboard-zh-CN")

    page.goto(f"{stack.base_url}/admin/users")
    expect(page.locator("#users-admin")).to_have_attribute("data-loaded", "true")
    row = page.locator(f'#users-table tr:has-text("{username}")')
    expect(row.locator(".badge.operator")).to_have_text("运维")
    expect(row.get_by_role("button", name=f"重置 {username} 的密码")).to_be_visible()
    assert_no_english(page)


def _other_browser(stack: Stack, username: str) -> httpx.Client:
    client = httpx.Client(base_url=stack.base_url, timeout=30)
    response = client.post("/api/auth/login", json={"username": username, "password": PASSWORD})
    assert response.status_code == 200, response.text
    return client


def _log_out_others(page: Page, stack: Stack, username: str, others: int, button: str) -> None:
    clients = [_other_browser(stack, username) for _ in range(others)]
    page.reload()
    expect(page.locator("#sessions-table tbody tr")).to_have_count(others + 1)
    page.get_by_role("button", name=button).click()
    expect(page.locator("#sessions-table tbody tr")).to_have_count(1)
    for client in clients:
        client.close()


def test_the_account_page_speaks_chinese_until_english_is_picked(
    zh_page: Page, stack: Stack, username: str
) -> None:
    page = zh_page
    start(page, stack, username, "/account")
    expect(page.get_by_role("heading", name="我的账号")).to_be_visible()
    expect(page.locator("#account")).to_have_attribute("data-loaded", "true")
    expect(page.locator(".token-state")).to_have_count(0)
    _log_out_others(page, stack, username, 2, "退出其他所有会话")
    expect(page.locator("#sessions-status")).to_have_text("其他 2 个会话已退出登录。")
    _log_out_others(page, stack, username, 1, "退出其他所有会话")
    expect(page.locator("#sessions-status")).to_have_text("其他 1 个会话已退出登录。")
    assert_no_english(page)
    screenshot(page, "account-zh-CN")

    # Picked on the account page: stored for the account, the page reloads in it (no logout).
    page.get_by_label("页面语言").select_option(label="English")
    expect(page.get_by_role("heading", name="Your account")).to_be_visible()
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.get_by_label("Language of the pages")).to_have_value("en")
    _log_out_others(page, stack, username, 1, "Log out all other sessions")
    expect(page.locator("#sessions-status")).to_have_text("1 other session is logged out.")
    _log_out_others(page, stack, username, 2, "Log out all other sessions")
    expect(page.locator("#sessions-status")).to_have_text("2 other sessions are logged out.")
    # The choice is the account's: the chat page is English too, though the browser asks Chinese.
    page.goto(f"{stack.base_url}/")
    expect(page.get_by_role("button", name="New chat")).to_be_visible()

    # Following the browser again brings Chinese back.
    page.goto(f"{stack.base_url}/account")
    page.get_by_label("Language of the pages").select_option(label="As the browser asks")
    expect(page.get_by_role("heading", name="我的账号")).to_be_visible()


def test_an_english_browser_switches_to_chinese(en_page: Page, stack: Stack, username: str) -> None:
    page = en_page
    start(page, stack, username, "/account")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.get_by_role("heading", name="Your account")).to_be_visible()
    page.get_by_label("Language of the pages").select_option(label="中文 (简体, 中国)")
    expect(page.get_by_role("heading", name="我的账号")).to_be_visible()
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    page.goto(f"{stack.base_url}/")
    expect(page.get_by_role("button", name="新对话")).to_be_visible()
    expect(page.get_by_role("link", name="账号")).to_be_visible()
    assert_no_english(page)
