"""Message search at 100,000 messages, a third of them Chinese (issue 21).

One user's 100,000 messages (500 conversations of 200, user and assistant alternating; the
replies' text in `result.value`, as turns store it) plus another user's 10,000 that must never
be found. Queries as a user types them: a rare English phrase, a common English word, a
four-character Chinese word, a common, a rare and an absent two-character one, a common
single character, a phrase with SQL wildcards, one that matches nothing. Each runs through
the service (`backend.services.search.search`, the newest 20 hits with snippets) on
SQLite (FTS5 trigram; under 3 characters the CJK table) and PostgreSQL (pg_trgm GIN; under 3
characters the CJK table's GIN index). Prints p50/p95 per query and over all, the size of the
indexes (the CJK one apart), and the target: p95 <= 50 ms on both.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics

from sqlalchemy import insert, select, text

from backend.db import create_engine, session_factory
from backend.models import Conversation, Message, User
from backend.services import search as message_search
from bench.common import each_database, row, timed, verdict
from tests.support.conversation import chinese_text

MESSAGES = 100_000
PER_CONVERSATION = 200
OTHER_MESSAGES = 10_000
TARGET_MS = 50.0
EN_VOCABULARY = [
    "the",
    "order",
    "camera",
    "lens",
    "delivery",
    "time",
    "price",
    "discount",
    "stock",
    "warehouse",
    "supplier",
    "review",
    "battery",
    "sensor",
    "weight",
    "travel",
    "hotel",
    "flight",
    "booking",
    "meeting",
    "report",
    "log",
    "service",
    "request",
    "response",
    "error",
    "timeout",
    "retry",
    "cache",
    "queue",
    "database",
    "query",
    "user",
    "customer",
    "account",
    "payment",
    "refund",
    "invoice",
    "compare",
    "update",
    "confirm",
    "found",
    "should",
    "could",
    "hope",
    "avoid",
    "include",
    "before",
    "after",
    "latest",
    "plan",
    "suggest",
    "budget",
    "team",
    "project",
    "deadline",
    "draft",
    "summary",
    "schedule",
    "office",
    "client",
    "contract",
    "design",
    "feature",
    "release",
]
QUERIES = {
    "rare English phrase": "zebra crossing",
    "common English word": "budget",
    "Chinese, 4 characters": "数据库查",
    "Chinese, 2 characters": "发票",
    "Chinese, 2 characters, rare": "上海",
    "Chinese, 2 characters, absent": "台风",
    "Chinese, 1 character": "票",
    "wildcards as text": "50% off_",
    "no match": "quantum entanglement",
}
# Planted in a few messages so the rare queries have something to find.
PLANTED = {"zebra crossing": 12, "50% off_": 8, "上海": 6}


def _english(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(EN_VOCABULARY)
        words.append(word)
        size += len(word) + 1
    return " ".join(words).capitalize() + "."


def _texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = [
        chinese_text(rng.randint(60, 200), seed + i) if i % 3 == 0 else _english(rng, rng.randint(80, 400))
        for i in range(count)
    ]
    for phrase, times in PLANTED.items():
        for index in rng.sample(range(count), times):
            out[index] = f"{out[index]} {phrase} {out[index][:20]}"
    return out


async def _seed(url: str) -> None:
    engine = create_engine(url)
    try:
        for username, count, seed in (("reader", MESSAGES, 1), ("other", OTHER_MESSAGES, 2)):
            texts = _texts(count, seed)
            async with session_factory(engine)() as db, db.begin():
                user = User(username=username, password_hash="x")
                db.add(user)
                await db.flush()
                conversations = count // PER_CONVERSATION
                await db.execute(
                    insert(Conversation),
                    [
                        {
                            "owner_id": user.id,
                            "title": f"{username} {i}",
                            "next_message_id": PER_CONVERSATION + 1,
                        }
                        for i in range(conversations)
                    ],
                )
                ids = list(
                    await db.scalars(
                        select(Conversation.id)
                        .where(Conversation.owner_id == user.id)
                        .order_by(Conversation.id)
                    )
                )
            for start in range(0, count, 5_000):
                rows = []
                for index in range(start, min(count, start + 5_000)):
                    number = index % PER_CONVERSATION + 1
                    assistant = number % 2 == 0
                    rows.append(
                        {
                            "conversation_id": ids[index // PER_CONVERSATION],
                            "message_id": number,
                            "role": "assistant" if assistant else "user",
                            "content": "" if assistant else texts[index],
                            "result": {"value": texts[index]} if assistant else None,
                        }
                    )
                async with session_factory(engine)() as db, db.begin():
                    await db.execute(insert(Message), rows)
        async with engine.begin() as connection:
            await connection.execute(text("ANALYZE"))
    finally:
        await engine.dispose()


async def _index_bytes(url: str) -> tuple[int, int]:
    """The size of the search indexes (bytes): all of them, and the CJK one alone (on
    PostgreSQL its table with its indexes)."""
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        every = "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name LIKE 'message_search%'"
        cjk = "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = 'message_search_cjk'"
    else:
        cjk = "SELECT pg_total_relation_size('message_search_cjk')"
        every = f"SELECT pg_relation_size('ix_messages_search_trgm') + ({cjk})"
    try:
        async with engine.connect() as connection:
            sizes = [int((await connection.execute(text(query))).scalar_one()) for query in (every, cjk)]
    finally:
        await engine.dispose()
    return sizes[0], sizes[1]


async def _measure(url: str, label: str, repeat: int) -> float:
    await _seed(url)
    engine = create_engine(url)
    samples: list[float] = []
    row(f"[{label}] {MESSAGES:,} messages", "hits", "p50 ms", "p95 ms", width=40)
    try:
        async with session_factory(engine)() as db:
            user = await db.scalar(select(User).where(User.username == "reader"))
            assert user is not None
            for name, query in QUERIES.items():
                hits = await message_search.search(db, user, query, 20)
                timings = await timed(lambda query=query: message_search.search(db, user, query, 20), repeat)
                samples.extend(timings.wall)
                row(
                    f"  {name} {query!r}",
                    len(hits),
                    f"{timings.median:.2f}",
                    f"{_p95(timings.wall):.2f}",
                    width=40,
                )
    finally:
        await engine.dispose()
    size, cjk = await _index_bytes(url)
    p95 = _p95(samples)
    row(
        f"  all queries: p95 {p95:.2f} ms",
        f"index {size / 2**20:.1f} MiB",
        f"(CJK {cjk / 2**20:.1f} MiB)",
        verdict(p95 <= TARGET_MS),
        width=40,
    )
    return p95


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


async def main_async(quick: bool, only: str | None) -> None:
    repeat = 20 if quick else 100
    await each_database(lambda url, label, _: _measure(url, label, repeat), only)
    if only == "sqlite":
        return
    print(f"target: p95 <= {TARGET_MS:.0f} ms on each database")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["sqlite", "postgresql"])
    args = parser.parse_args()
    asyncio.run(main_async(args.quick, args.only))


if __name__ == "__main__":
    main()
