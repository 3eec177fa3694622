"""Paging cost must not grow with size (issue 2).

A page of 50 messages from a conversation of 10,000 messages versus one of 100, and a page of
50 conversations for a user with 10,000 conversations versus 100; first and deepest page; on
SQLite and PostgreSQL. Target: the 10,000 case within 1.5x of the 100 case.
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial

from sqlalchemy import insert, select, text

from backend.db import create_engine, session_factory
from backend.models import Conversation, Message, User
from backend.models.base import utcnow
from backend.services.conversations import conversations, messages
from bench.common import each_database, median_ms, row, run_with_quick_flag
from tests.support import databases

PAGE = 50


async def _seed(url: str, sizes: tuple[int, ...]) -> dict[int, tuple[int, int]]:
    """For each size: a user with `size` conversations and one conversation of `size` messages."""
    engine = create_engine(url)
    made: dict[int, tuple[int, int]] = {}
    async with session_factory(engine)() as db, db.begin():
        for size in sizes:
            user = User(username=f"u{size}", password_hash="x")
            db.add(user)
            await db.flush()
            base = utcnow()
            await db.execute(
                insert(Conversation),
                [
                    {"owner_id": user.id, "title": f"c{i}", "updated_at": base - timedelta(seconds=i)}
                    for i in range(size)
                ],
            )
            target = await db.scalar(select(Conversation.id).where(Conversation.owner_id == user.id).limit(1))
            assert target is not None
            await db.execute(
                insert(Message),
                [
                    {
                        "conversation_id": target,
                        "message_id": i + 1,
                        "role": "user",
                        "content": f"message {i}",
                    }
                    for i in range(size)
                ],
            )
            await databases.chain_messages(db, target)
            made[size] = (user.id, target)
    # Fresh bulk loads have no planner statistics yet; a live database has them (autovacuum).
    async with engine.begin() as connection:
        await connection.execute(text("ANALYZE"))
    await engine.dispose()
    return made


async def _measure(url: str, label: str, repeat: int) -> None:
    sizes = (100, 10_000)
    seeded = await _seed(url, sizes)
    engine = create_engine(url)
    factory = session_factory(engine)
    results: dict[tuple[str, int], float] = {}
    for size, (user_id, conversation_id) in seeded.items():
        async with factory() as db:
            user = await db.get(User, user_id)
            conversation = await db.get(Conversation, conversation_id)
            assert user is not None and conversation is not None

            _, cursor = await conversations.list_page(db, user, size - PAGE - 1, None, None)
            cases = {
                "messages, newest page": partial(messages.visible_messages, db, conversation, None, PAGE),
                "messages, oldest page": partial(messages.visible_messages, db, conversation, PAGE + 1, PAGE),
                "conversations, first page": partial(conversations.list_page, db, user, PAGE, None, None),
                "conversations, last page": partial(conversations.list_page, db, user, PAGE, cursor, None),
            }
            for name, fn in cases.items():
                results[(name, size)] = await median_ms(fn, repeat)
    await engine.dispose()

    row(f"[{label}] page of {PAGE}", "100 items ms", "10k items ms", "ratio")
    for name in (
        "messages, newest page",
        "messages, oldest page",
        "conversations, first page",
        "conversations, last page",
    ):
        small, large = results[(name, 100)], results[(name, 10_000)]
        row(f"  {name}", f"{small:.3f}", f"{large:.3f}", f"{large / small:.2f}x")


async def main_async(quick: bool) -> None:
    repeat = 30 if quick else 200
    await each_database(lambda url, label, _: _measure(url, label, repeat))
    print("target: every ratio <= 1.5x")


def main() -> None:
    run_with_quick_flag(main_async)


if __name__ == "__main__":
    main()
