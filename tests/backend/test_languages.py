"""The page's language on the server (issue 24): `Accept-Language` until the account picks one
(`PUT /api/auth/language`), an unknown language refused, and migration 0019 that stores the
choice (on SQLite and PostgreSQL, up and down)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from alembic import command
from sqlalchemy import text

from backend import i18n
from backend.db import alembic_config
from tests.support.databases import insert_first_user, plain_sql

LANGUAGE_REVISION = "0019"


@pytest.mark.parametrize(
    ("header", "chosen", "expected"),
    [
        ("zh-CN,zh;q=0.9,en;q=0.8", None, "zh-CN"),
        ("zh-TW", None, "zh-CN"),  # the closest catalog of the language beats English
        ("fr-FR,fr;q=0.9,zh;q=0.5,en;q=0.4", None, "zh-CN"),
        ("en;q=0.9, zh-CN;q=0.5", None, "en"),
        ("fr", None, "en"),
        (None, None, "en"),
        ("zh-CN", "en", "en"),  # the account's choice wins over the browser
        ("en", "zh-CN", "zh-CN"),
        ("zh-CN", "xx", "zh-CN"),  # a choice whose catalog is gone falls back to the browser
    ],
)
def test_the_page_language(header: str | None, chosen: str | None, expected: str) -> None:
    assert i18n.negotiate(header, chosen) == expected


async def test_the_account_language_follows_the_browser_until_picked(alice: httpx.AsyncClient) -> None:
    chinese = {"Accept-Language": "zh-CN,zh;q=0.9"}
    assert (await alice.get("/api/auth/me")).json()["language"] is None
    page = await alice.get("/account", headers=chinese)
    assert '<html lang="zh-CN">' in page.text and "我的账号" in page.text

    picked = await alice.put("/api/auth/language", json={"language": "en"})
    assert picked.status_code == 200 and picked.json()["language"] == "en"
    page = await alice.get("/account", headers=chinese)
    assert '<html lang="en">' in page.text and "Your account" in page.text

    refused = await alice.put("/api/auth/language", json={"language": "tlh"})
    assert refused.status_code == 422 and refused.json()["code"] == "unknown_language"
    assert (await alice.put("/api/auth/language", json={"language": None})).json()["language"] is None
    assert '<html lang="zh-CN">' in (await alice.get("/", headers=chinese)).text


async def test_the_login_page_follows_the_browser(anonymous: httpx.AsyncClient) -> None:
    page = await anonymous.get("/login", headers={"Accept-Language": "zh-CN"})
    assert '<html lang="zh-CN">' in page.text and "<h2>登录</h2>" in page.text
    assert '"locale": "zh-CN"' in page.text  # the modules' catalog, rendered into the page


async def _languages(url: str) -> list[str | None]:
    async with plain_sql(url) as connection:
        return list((await connection.execute(text("SELECT language FROM users ORDER BY id"))).scalars())


async def _insert_user(url: str) -> None:
    async with plain_sql(url) as connection:
        await insert_first_user(connection, "old")


def test_the_language_migration_up_and_down(unmigrated_url: str) -> None:
    config = alembic_config(unmigrated_url)
    command.upgrade(config, "0018")
    asyncio.run(_insert_user(unmigrated_url))
    command.upgrade(config, LANGUAGE_REVISION)
    assert asyncio.run(_languages(unmigrated_url)) == [None]  # existing accounts follow the browser
    command.downgrade(config, "0018")
    with pytest.raises(Exception, match="language"):
        asyncio.run(_languages(unmigrated_url))
    command.upgrade(config, "head")
    assert asyncio.run(_languages(unmigrated_url)) == [None]
