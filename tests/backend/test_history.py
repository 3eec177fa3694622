"""Model history resolution (SPEC 6.2) on both databases: the case table, `limit`, forks,
`before_message_id`, the history endpoint (identical to the in-process pipeline, markers
included), the turn capability's scope, and the context endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.models import Conversation, TurnStatus, User
from backend.models.base import utcnow
from backend.services.dashboard import rollups
from backend.services.delivery import turn_endings, turns
from backend.services.records.history import resolve_history
from backend.settings import Settings
from chat_shell.contracts import ChainMessage, ContextMetrics, ModelHistory, TurnResult
from tests.support.api import new_user, serve_with_owner
from tests.support.capabilities import CAPABILITY_KEY, capability, end_turn, running_turn
from tests.support.history import CASES, SUMMARY_PREFIX, retained, rows, seed_cases, shape, summary
from tests.support.scripted_provider import ScriptedProvider, text

LIMITS = (None, 0, 1, 2, 1000)


@dataclass
class World:
    base_url: str
    owner: httpx.AsyncClient
    sessions: async_sessionmaker[AsyncSession]
    cases: dict[str, int]

    async def resolved(self, conversation_id: int, **options: object) -> list[ChainMessage]:
        async with self.sessions() as db:
            conversation = await db.get(Conversation, conversation_id)
            assert conversation is not None
            return (await resolve_history(db, conversation, **options)).messages  # type: ignore[arg-type]

    async def owner_id(self) -> int:
        async with self.sessions() as db:
            found = await db.scalar(select(User.id).where(User.username == "owner"))
            assert found is not None
            return found


@pytest.fixture
async def world(database_url: str, chat_settings: Callable[..., Settings]) -> AsyncIterator[World]:
    settings = chat_settings(database_url, capability_key=CAPABILITY_KEY)
    async with serve_with_owner(settings, "owner") as (base_url, owner, sessions):
        yield World(base_url, owner, sessions, await seed_cases(sessions, "owner"))


async def _history(client: httpx.AsyncClient, conversation_id: int, **params: object) -> httpx.Response:
    query = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items() if v is not None}
    return await client.get(f"/api/conversations/{conversation_id}/history", params=query)


def _dump(history: list[ChainMessage]) -> list[dict]:
    return [entry.model_dump(mode="json") for entry in history]


async def test_the_case_table_resolves_as_specified(world: World) -> None:
    for case in CASES:
        assert shape(await world.resolved(world.cases[case.name])) == case.expected, case.name


async def test_the_endpoint_returns_exactly_the_pipeline_for_every_case_and_limit(world: World) -> None:
    for case in CASES:
        cid = world.cases[case.name]
        for limit in LIMITS:
            for latest in (True, False):
                expected = await world.resolved(cid, limit=limit, from_latest_compaction=latest)
                response = await _history(world.owner, cid, limit=limit, from_latest_compaction=latest)
                assert response.status_code == 200, response.text
                body = ModelHistory.model_validate(response.json())
                # Equal models: every marker (token counts, calibration samples, source ids) survived.
                assert _dump(body.messages) == _dump(expected), (case.name, limit, latest)


async def test_markers_survive_http_and_a_look_alike_user_message_stays_a_user_message(world: World) -> None:
    cid = world.cases["no_checkpoint"]
    raw = (await _history(world.owner, cid)).json()["messages"]
    compact_tool = next(entry for entry in raw if entry["role"] == "tool")
    assert compact_tool["metadata"]["compacted"] is True
    assert compact_tool["metadata"]["token_count"] == {
        "encoding": "cl100k_base",
        "content_hash": "abc",
        "tokens": 7,
    }
    sampled = next(entry for entry in raw if entry.get("metadata", {}).get("local_input_tokens"))
    assert (sampled["metadata"]["provider_input_tokens"], sampled["metadata"]["profile"]) == (840, "gpt-4o")
    assert raw[3]["tool_calls"][0]["args"] == {"rows": 2, "seed": 1, "note": None}
    look_alike = raw[6]
    assert look_alike["content"].startswith(SUMMARY_PREFIX) and look_alike["role"] == "user"
    assert "summary_compacted" not in look_alike["metadata"]
    assert look_alike["metadata"]["source_message_id"] == 5

    checkpointed = (await _history(world.owner, world.cases["newest_checkpoint_wins"])).json()
    assert checkpointed["checkpoint_message_id"] == 8
    opening = checkpointed["messages"][0]["metadata"]
    assert (opening["summary_compacted"], opening["summary_version"]) == (True, 1)


async def test_limit_counts_rows_after_the_checkpoint_and_never_cuts_it(world: World) -> None:
    cid = world.cases["newest_checkpoint_wins"]
    checkpoint = [
        (f"{SUMMARY_PREFIX}\nS2: one to four", "user"),
        ("r3", "assistant"),
        ("four", "user"),
        ("r4", "assistant"),
    ]

    async def contents(limit: int | None) -> list[tuple[object, str]]:
        return [(e.content, e.role) for e in await world.resolved(cid, limit=limit)]

    assert await contents(0) == []
    assert await contents(1) == [*checkpoint, ("r5", "assistant")]
    assert await contents(2) == [*checkpoint, ("five", "user"), ("r5", "assistant")]
    assert (
        await contents(1000) == await contents(None) == [*checkpoint, ("five", "user"), ("r5", "assistant")]
    )
    plain = world.cases["no_checkpoint"]
    assert [e.content for e in await world.resolved(plain, limit=1)] == ["Noted."]
    assert [e.role for e in await world.resolved(plain, limit=2)] == ["user", "assistant"]


async def test_before_message_id_picks_the_checkpoint_before_it(world: World) -> None:
    cid = world.cases["newest_checkpoint_wins"]
    before_five = [e.content for e in await world.resolved(cid, before_message_id=9)]
    assert before_five == [f"{SUMMARY_PREFIX}\nS2: one to four", "r3", "four", "r4"]
    # Message 8 holds the newest checkpoint: excluded, so the older one (message 4) opens.
    before_eight = [e.content for e in await world.resolved(cid, before_message_id=8)]
    assert before_eight == [f"{SUMMARY_PREFIX}\nS1: one, two", "two", "r2", "three", "r3", "four"]


async def test_full_history_ignores_checkpoints_without_repeating_anything(world: World) -> None:
    cid = world.cases["newest_checkpoint_wins"]
    full = await world.resolved(cid, from_latest_compaction=False)
    assert [e.content for e in full] == ["one", "r1", "two", "r2", "three", "r3", "four", "r4", "five", "r5"]
    assert not any(e.metadata.summary_compacted or e.metadata.checkpoint_retained for e in full)


async def test_a_checkpoint_after_the_fork_point_is_not_inherited(world: World) -> None:
    grandchild = world.cases["fork_of_fork_with_ancestor_checkpoint"]
    history = await world.resolved(grandchild)
    assert not any("S-late" in str(e.content) for e in history)
    sources = [
        (e.metadata.source_conversation_id, e.metadata.source_message_id) for e in history if e.role == "user"
    ]
    root, child = grandchild - 2, grandchild - 1
    assert sources[2:] == [(root, 5), (child, 7), (grandchild, 9)]


async def test_a_turn_that_ends_without_a_chain_keeps_the_checkpoint_it_stored(world: World) -> None:
    """A turn that compacted and then lost its runtime (no chain in its result) leaves the
    checkpoint in place, so the next turn starts from it instead of summarizing again."""
    cid = world.cases["no_checkpoint"]
    async with world.sessions() as db, db.begin():
        owner = await db.scalar(select(User).where(User.username == "owner"))
        conversation = await db.get(Conversation, cid)
        assert owner is not None and conversation is not None
        started = await turns.start_turn(db, owner, conversation, "go on", [], None)
        await turn_endings.store_checkpoint(
            db, started.assistant_message.id, [summary("S-mid"), retained("user", "go on")]
        )
    async with world.sessions() as db, db.begin():
        lost = TurnResult(value="cut sho", termination_reason="internal_error")
        error = {"code": "runtime_unavailable", "message": "gone"}
        await turn_endings.finish_turn(db, started, TurnStatus.FAILED, lost, error, utcnow(), 1)
        await rollups.write_staged(db)
    assert shape(await world.resolved(cid)) == rows(
        """
        user summary  | S-mid
        user retained | go on
        assistant     | cut sho
        """
    )


# -- the turn capability ---------------------------------------------------------------------


async def test_a_capability_reads_its_conversation_only_while_its_turn_runs(world: World) -> None:
    owner_id = await world.owner_id()
    cid = world.cases["newest_checkpoint_wins"]
    other = world.cases["no_checkpoint"]
    turn_id = await running_turn(world.sessions, cid)
    async with httpx.AsyncClient(base_url=world.base_url) as service:
        service.headers["Authorization"] = f"Bearer {capability(turn_id, cid, owner_id)}"
        ok = await _history(service, cid)
        assert ok.status_code == 200
        assert ok.json() == (await _history(world.owner, cid)).json()
        assert (await service.get(f"/api/conversations/{cid}/messages/outline")).status_code == 200
        assert (await service.get(f"/api/conversations/{cid}/messages/1/text")).status_code == 200
        # Another conversation of the same owner: not found, as for other users' objects.
        assert (await _history(service, other)).status_code == 404
        assert (await service.get(f"/api/conversations/{other}/messages/1/text")).status_code == 404
        # Nothing else: not the transcript, not the context, not sending, not the owner's account.
        assert (await service.get(f"/api/conversations/{cid}/messages")).status_code == 401
        assert (await service.get(f"/api/conversations/{cid}/context")).status_code == 401
        sent = await service.post(f"/api/conversations/{cid}/messages", json={"content": "hi"})
        assert sent.status_code == 401
        assert (await service.get("/api/conversations")).status_code == 401

        # The turn ends: the same capability, unexpired, reads nothing more.
        await end_turn(world.sessions, turn_id)
        ended = await _history(service, cid)
        assert ended.status_code == 401 and ended.json()["code"] == "invalid_capability"
        assert "ended" in ended.json()["message"]


async def test_a_bad_capability_is_refused(world: World) -> None:
    owner_id = await world.owner_id()
    cid = world.cases["no_checkpoint"]
    other = world.cases["newest_checkpoint_wins"]
    turn_id = await running_turn(world.sessions, cid)
    other_turn = await running_turn(world.sessions, other)
    genuine = capability(turn_id, cid, owner_id)
    refused = {
        "expired": (capability(turn_id, cid, owner_id, seconds=-1), 401),
        "tampered": (genuine.replace(f"cst2.{turn_id}.{cid}.", f"cst2.{other_turn}.{cid}.", 1), 401),
        # Right format, signed with what used to be the compose default, or with another key.
        "default key": (capability(turn_id, cid, owner_id, key="change-me"), 401),
        "other key": (capability(turn_id, cid, owner_id, key="another-secret"), 401),
        "garbage": ("cst2.not-a-capability", 401),
        "not numbers": ("cst2.1.2.3.x." + genuine.rpartition(".")[2], 401),
        # Valid signatures, but for another conversation's turn.
        "another conversation's turn": (capability(other_turn, cid, owner_id), 401),
        "another conversation": (capability(other_turn, other, owner_id), 404),
        "wrong owner": (capability(turn_id, cid, owner_id + 1), 404),
        "unknown turn": (capability(other_turn + 100, cid, owner_id), 401),
    }
    async with httpx.AsyncClient(base_url=world.base_url) as service:
        service.headers["Authorization"] = f"Bearer {genuine}"
        assert (await _history(service, cid)).status_code == 200
        for defect, (token, status) in refused.items():
            service.headers["Authorization"] = f"Bearer {token}"
            response = await _history(service, cid)
            assert response.status_code == status, (defect, response.text)
            assert response.json()["code"] == ("not_found" if status == 404 else "invalid_capability"), defect


async def test_other_users_see_nothing_of_the_model_view(world: World) -> None:
    cid = world.cases["no_checkpoint"]
    stranger = await new_user(world.base_url, "stranger")
    try:
        for path in ("history", "context", "messages/outline", "messages/1/text", "attachments/1"):
            response = await stranger.get(f"/api/conversations/{cid}/{path}")
            assert response.status_code == 404, path
    finally:
        await stranger.aclose()


async def test_capabilities_are_refused_where_no_capability_key_is_configured(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """Package mode without a key signs with a random one of its own: no capability from
    outside reads anything, whatever key it was made with."""
    settings = make_settings(sqlite_url)
    async with serve_with_owner(settings, "owner") as (base_url, owner, sessions):
        cid = (await owner.post("/api/conversations", json={"title": "x"})).json()["id"]
        turn_id = await running_turn(sessions, cid)
        async with httpx.AsyncClient(base_url=base_url) as service:
            for key in (CAPABILITY_KEY, "change-me", ""):
                response = await service.get(
                    f"/api/conversations/{cid}/history",
                    headers={"Authorization": f"Bearer {capability(turn_id, cid, 1, key=key)}"},
                )
                assert response.status_code == 401 and response.json()["code"] == "invalid_capability"


# -- the context endpoint --------------------------------------------------------------------


async def test_the_context_shows_what_the_model_sees_next_turn(
    world: World, scripted_provider: ScriptedProvider
) -> None:
    cid = world.cases["newest_checkpoint_wins"]
    scripted_provider.script(text("r6"))
    sent = await world.owner.post(
        f"/api/conversations/{cid}/messages", json={"content": "six"}, params={"wait": "true"}
    )
    assert sent.status_code == 200, sent.text
    context = (await world.owner.get(f"/api/conversations/{cid}/context")).json()
    assert context["view"] == "model" and context["checkpoint_message_id"] == 8
    assert context["history"] == (await _history(world.owner, cid)).json()["messages"]
    assert [e["content"] for e in context["history"]][-2:] == ["six", "r6"]
    stored = (await world.owner.get(f"/api/conversations/{cid}/messages")).json()["items"][-1]
    assert ContextMetrics.model_validate(context["metrics"]) == ContextMetrics.model_validate(
        stored["result"]["context_metrics"]
    )
    assert context["metrics_message_id"] == stored["message_id"] == 12
    assert context["model"] == "gpt-4o-mini"
    # The transcript stays the transcript: it never carries the summary.
    transcript = (await world.owner.get(f"/api/conversations/{cid}/messages")).json()["items"]
    assert not any(SUMMARY_PREFIX in (m["content"] or "") for m in transcript)

    fresh = (await world.owner.post("/api/conversations", json={"title": "new"})).json()["id"]
    empty = (await world.owner.get(f"/api/conversations/{fresh}/context")).json()
    assert empty["history"] == [] and "metrics" not in empty and "checkpoint_message_id" not in empty
