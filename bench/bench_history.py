"""Model-history load must cost what the turns after the checkpoint cost (issue 8, SPEC 6.2).

A conversation of 10,000 turns whose latest checkpoint is 20 turns back versus one of 100 turns
with the same tail (same checkpoint chain, same 20 turns after it): the history load, in-process
(package mode's loader) and over HTTP (what a remote chat_shell does), on SQLite and PostgreSQL.
Target: the 10,000-turn load within 1.5x of the 100-turn one. Also printed: loading the full
10,000-turn history (ignoring checkpoints) versus from the checkpoint, the query plans (the
walk up the message tree to the checkpoint uses the primary key, never a scan of the
conversation), and the
per-attempt cost of choosing the offered tool set.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from backend.app import create_app
from backend.db import create_engine, session_factory
from backend.models import Conversation, Message, User
from backend.services.conversations import branches
from backend.services.delivery import capabilities
from backend.services.records.history import resolve_history
from backend.settings import Settings
from bench.common import each_database, median_ms, row, run_with_quick_flag
from chat_shell.contracts import ChainMessage, ChainMetadata, ToolCall
from chat_shell.tools.registry import TurnFacts, default_tools
from tests.support import databases
from tests.support.capabilities import CAPABILITY_KEY, running_turn
from tests.support.servers import serve

TAIL_TURNS = 20
WORDS = "the quick brown fox jumps over the lazy dog while the budget stays under fifty thousand yen "


async def paired_medians(
    small: Callable[[], Awaitable[object]], large: Callable[[], Awaitable[object]], repeat: int
) -> tuple[float, float]:
    """Medians (ms) of two operations timed alternately, so load on a shared machine hits both alike."""
    for _ in range(2):
        await small()
        await large()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, into in ((small, samples[0]), (large, samples[1])):
            start = time.perf_counter()
            await fn()
            into.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples[0]), statistics.median(samples[1])


def _dump(chain: list[ChainMessage]) -> list[dict[str, Any]]:
    return [entry.model_dump(mode="json", exclude_none=True, exclude_defaults=True) for entry in chain]


def _turn_chain(turn: int) -> list[ChainMessage]:
    """An ordinary turn: a reply, and every fourth turn a tool round with a compact output."""
    reply = ChainMessage(role="assistant", content=f"Answer {turn}: " + WORDS * 6)
    if turn % 4:
        return [reply]
    call_id = f"call_{turn}"
    return [
        ChainMessage(
            role="assistant", content="Checking.", tool_calls=[ToolCall(id=call_id, name="generate_report")]
        ),
        ChainMessage(
            role="tool",
            content="[compact report]\n" + WORDS * 16,
            tool_call_id=call_id,
            name="generate_report",
            metadata=ChainMetadata(compacted=True),
        ),
        reply,
    ]


def _checkpoint_chain(turn: int) -> list[ChainMessage]:
    return [
        ChainMessage(
            role="user",
            content="[Summary of earlier turns]\n" + WORDS * 60,
            metadata=ChainMetadata(summary_compacted=True, summary_version=1),
        ),
        ChainMessage(role="assistant", content=WORDS * 4, metadata=ChainMetadata(checkpoint_retained=True)),
        ChainMessage(
            role="user", content=f"Question {turn}", metadata=ChainMetadata(checkpoint_retained=True)
        ),
        *_turn_chain(turn),
    ]


def _rows(conversation_id: int, turns: int, checkpoints: set[int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        # The tail's content depends on the distance from the end, so both conversations share it.
        label = turn - turns
        chain = _checkpoint_chain(label) if turn in checkpoints else _turn_chain(label)
        rows.append(
            {
                "conversation_id": conversation_id,
                "message_id": 2 * turn - 1,
                "role": "user",
                "status": "completed",
                "content": f"Question {label}: " + WORDS * 2,
            }
        )
        rows.append(
            {
                "conversation_id": conversation_id,
                "message_id": 2 * turn,
                "role": "assistant",
                "status": "completed",
                "content": "",
                "result": {"value": str(chain[-1].content), "blocks": [], "messages_chain": _dump(chain)},
                "has_checkpoint": turn in checkpoints,
            }
        )
    return rows


async def _seed(engine: AsyncEngine, sizes: tuple[int, ...]) -> tuple[int, dict[int, int]]:
    made: dict[int, int] = {}
    async with session_factory(engine)() as db, db.begin():
        user = User(username="bench", password_hash="x")
        db.add(user)
        await db.flush()
        for size in sizes:
            conversation = Conversation(owner_id=user.id, title=f"{size} turns", next_message_id=2 * size + 1)
            db.add(conversation)
            await db.flush()
            # Older checkpoints too: the newest one must win without reading the others.
            checkpoints = {size - TAIL_TURNS, *range(size // 4, size - TAIL_TURNS, max(1, size // 4))}
            rows = _rows(conversation.id, size, checkpoints)
            for start in range(0, len(rows), 2_000):
                await db.execute(insert(Message), rows[start : start + 2_000])
            await databases.chain_messages(db, conversation.id)
            made[size] = conversation.id
    async with engine.begin() as connection:
        await connection.execute(text("ANALYZE"))
    return user.id, made


async def _plans(
    engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession], conversation_id: int, size: int
) -> None:
    async with sessions() as db:
        conversation = await db.get_one(Conversation, conversation_id)
        leaf = conversation.current_leaf_pk
    assert leaf is not None
    queries = {
        "walk up the path to the checkpoint": branches.walk_query(leaf, to_checkpoint=True),
        "a page of the path": branches.walk_query(leaf, limit=50),
    }
    dialect = engine.dialect
    for name, query in queries.items():
        sql = str(query.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
        explain = "EXPLAIN QUERY PLAN " if dialect.name == "sqlite" else "EXPLAIN "
        async with engine.connect() as connection:
            plan = [
                " ".join(str(part) for part in line)
                for line in (await connection.execute(text(explain + sql)))
            ]
        # A range search on an index; never a full scan of the table or of an index.
        upper = [line.upper() for line in plan]
        indexed = any("SEARCH" in line or "INDEX SCAN" in line for line in upper) and not any(
            "SCAN MESSAGES" in line or "SEQ SCAN" in line for line in upper
        )
        print(f"  plan, {name}: {'indexed' if indexed else 'NOT INDEXED'}")
        for line in plan:
            print(f"      {line}")


async def _http_ms(
    settings: Settings, owner_id: int, conversations: dict[int, int], repeat: int
) -> tuple[float, float]:
    key = CAPABILITY_KEY.encode()
    app = create_app(settings)
    async with (
        serve(app) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=120) as client,
    ):
        loads = []
        for size, conversation_id in conversations.items():
            # A capability reads only while its turn runs: one is marked running for it.
            turn_id = await running_turn(app.state.ctx.sessions, conversation_id)
            grant = capabilities.Capability(turn_id, conversation_id, owner_id, int(time.time()) + 3600)
            headers = {"Authorization": f"Bearer {capabilities.mint(key, grant)}"}
            path = f"/api/conversations/{conversation_id}/history?before_message_id={2 * size + 1}"

            async def load(path: str = path, headers: dict[str, str] = headers) -> None:
                response = await client.get(path, headers=headers)
                assert response.status_code == 200, response.text

            loads.append(load)
        return await paired_medians(loads[0], loads[1], repeat)


async def _measure(url: str, label: str, sizes: tuple[int, int], repeat: int, data_dir: Path) -> None:
    small, large = sizes
    engine = create_engine(url)
    started = time.perf_counter()
    owner_id, conversations = await _seed(engine, sizes)
    print(f"[{label}] seeded {small} and {large} turns in {time.perf_counter() - started:.1f} s")
    sessions = session_factory(engine)

    async def load(conversation_id: int, before_message_id: int) -> list[ChainMessage]:
        async with sessions() as db:
            conversation = await db.get(Conversation, conversation_id)
            assert conversation is not None
            return (await resolve_history(db, conversation, before_message_id=before_message_id)).messages

    lengths = {size: len(await load(cid, 2 * size + 1)) for size, cid in conversations.items()}
    assert lengths[small] == lengths[large], lengths
    timings = dict(
        zip(
            sizes,
            await paired_medians(
                lambda: load(conversations[small], 2 * small + 1),
                lambda: load(conversations[large], 2 * large + 1),
                repeat,
            ),
            strict=True,
        )
    )

    async def full() -> None:
        async with sessions() as db:
            conversation = await db.get_one(Conversation, conversations[large])
            await resolve_history(db, conversation, from_latest_compaction=False)

    full_ms = await median_ms(full, max(3, repeat // 20), warmup=1)
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=data_dir,
        database_url=url,
        local_model="off",
        openai_base_url="http://127.0.0.1:9/v1",
        telemetry_enabled=False,
        capability_key=CAPABILITY_KEY,
    )
    http = dict(zip(sizes, await _http_ms(settings, owner_id, conversations, repeat), strict=True))

    row(
        f"[{label}] history load ({lengths[large]} messages)",
        f"{small} turns ms",
        f"{large} turns ms",
        "ratio",
    )
    row(
        "  in-process (package mode loader)",
        f"{timings[small]:.3f}",
        f"{timings[large]:.3f}",
        f"{timings[large] / timings[small]:.2f}x",
    )
    row(
        "  HTTP with a capability (service mode)",
        f"{http[small]:.3f}",
        f"{http[large]:.3f}",
        f"{http[large] / http[small]:.2f}x",
    )
    row(
        f"  full {large}-turn history vs from checkpoint",
        f"{timings[large]:.3f}",
        f"{full_ms:.1f}",
        f"{full_ms / timings[large]:.0f}x",
    )
    await _plans(engine, sessions, conversations[large], large)
    await engine.dispose()


def _tool_set_cost() -> None:
    registry = default_tools()
    facts = [TurnFacts(has_checkpoint=bool(i % 2), can_browse_history=True) for i in range(10_000)]
    registry.offered(facts[0])
    registry.offered(facts[1])
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for fact in facts:
            registry.offered(fact)
        samples.append((time.perf_counter() - start) / len(facts) * 1e6)
    start = time.perf_counter()
    fresh = default_tools().offered(facts[1])
    first_ms = (time.perf_counter() - start) * 1000
    print(
        f"tool set per attempt: {statistics.median(samples):.2f} µs (cached); first use of a set "
        f"({len(fresh.tools)} tools, schemas built): {first_ms:.2f} ms"
    )


async def main_async(quick: bool) -> None:
    sizes = (100, 2_000) if quick else (100, 10_000)
    repeat = 15 if quick else 60
    await each_database(lambda url, label, scratch: _measure(url, label, sizes, repeat, scratch))
    _tool_set_cost()
    print(f"target: the {sizes[1]}-turn history load within 1.5x of the {sizes[0]}-turn one")


def main() -> None:
    run_with_quick_flag(main_async)


if __name__ == "__main__":
    main()
