"""Attachments and messages: linking at send time, deletion before and after sending, and the
package-mode reader's scope (conversation, owner, forks) and paging."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable

import pytest

from backend.db import transaction
from backend.models import Conversation, Message, MessageStatus, Role, User
from backend.services.attachments import attachments
from backend.services.errors import Conflict, NotFound
from backend.settings import Settings
from tests.support.api import new_user
from tests.support.attachments import AttachmentWorld, attachment_world
from tests.support.files import PNG_1X1, corrupt, docx_bytes
from tests.support.uploads import upload_ok


@pytest.fixture
async def world(database_url: str, make_settings: Callable[..., Settings]) -> AsyncIterator[AttachmentWorld]:
    async with attachment_world(make_settings(database_url)) as made:
        yield made


async def _send(world: AttachmentWorld, attachment_ids: list[int], conversation_id: int | None = None) -> int:
    """What the send path does: store the user message and link its attachments, in one
    transaction. Returns the message's message_id."""
    cid = conversation_id or world.conversation_id
    async with transaction(world.sessions) as db:
        conversation = await db.get_one(Conversation, cid)
        user = await db.get_one(User, conversation.owner_id)
        number = conversation.next_message_id
        message = Message(
            conversation_id=cid,
            message_id=number,
            role=Role.USER,
            status=MessageStatus.COMPLETED,
            content="see files",
            parent_pk=conversation.current_leaf_pk,
        )
        db.add(message)
        await db.flush()
        await attachments.link_to_message(db, user, conversation, message, attachment_ids)
        conversation.next_message_id = number + 1
        conversation.current_leaf_pk = message.id
    return number


async def test_sent_attachments_are_listed_with_the_message(world: AttachmentWorld) -> None:
    first = await world.attach("a.txt", b"alpha\n")
    second = await world.attach("b.txt", b"beta\n")
    await _send(world, [second, first])
    listed = (await world.client.get(f"/api/conversations/{world.conversation_id}/messages")).json()["items"]
    assert [(a["id"], a["filename"], a["deleted"]) for a in listed[0]["attachments"]] == [
        (first, "a.txt", False),
        (second, "b.txt", False),
    ]
    meta = (await world.client.get(f"/api/attachments/{first}")).json()
    assert meta["sent"] is True and meta["conversation_id"] == world.conversation_id


async def test_deleted_between_upload_and_send_rejects_the_send(world: AttachmentWorld) -> None:
    kept = await world.attach("kept.txt", b"kept\n")
    dropped = await world.attach("dropped.txt", b"dropped\n")
    assert (await world.client.delete(f"/api/attachments/{dropped}")).status_code == 204
    with pytest.raises(NotFound) as raised:
        await _send(world, [kept, dropped])
    assert f"attachment {dropped} not found" in raised.value.message
    # Nothing was stored: no message, and the surviving upload is still unsent.
    assert (await world.client.get(f"/api/conversations/{world.conversation_id}/messages")).json()[
        "items"
    ] == []
    assert (await world.client.get(f"/api/attachments/{kept}")).json()["sent"] is False


async def test_send_rules(world: AttachmentWorld) -> None:
    once = await world.attach("once.txt", b"once\n")
    await _send(world, [once])
    with pytest.raises(Conflict) as again:
        await _send(world, [once])
    assert again.value.code == "attachment_already_sent"

    other = (await world.client.post("/api/conversations", json={"title": "other"})).json()["id"]
    elsewhere = await world.attach("here.txt", b"here\n")
    with pytest.raises(NotFound):
        await _send(world, [elsewhere], conversation_id=other)

    # A corrupt document can be sent: the turn proceeds and the model is told why there is no text.
    broken = await world.attach("broken.pdf", b"%PDF-1.7\n1 0 obj << /Type /Catalog")
    await _send(world, [broken])
    ref = await world.reader.describe(world.conversation_id, broken)
    assert ref.status == "failed" and "could not be read" in (ref.note or "")


async def test_deleting_a_sent_attachment_keeps_the_message(world: AttachmentWorld) -> None:
    sent = await world.attach("report.txt", b"quarterly numbers\n" * 5000)
    await _send(world, [sent])
    assert (await world.client.delete(f"/api/attachments/{sent}")).status_code == 204
    assert (await world.client.get(f"/api/attachments/{sent}")).status_code == 404
    message = (await world.client.get(f"/api/conversations/{world.conversation_id}/messages")).json()[
        "items"
    ][0]
    assert message["content"] == "see files"
    assert [(a["filename"], a["size_bytes"], a["deleted"]) for a in message["attachments"]] == [
        ("report.txt", 90_000, True)
    ]
    with pytest.raises(LookupError, match="was deleted by its owner"):
        await world.reader.describe(world.conversation_id, sent)


async def test_reader_scope(world: AttachmentWorld) -> None:
    mine = await world.attach("mine.txt", b"mine\n")
    assert (await world.reader.describe(world.conversation_id, mine)).filename == "mine.txt"
    with pytest.raises(LookupError, match="not available in this conversation"):
        await world.reader.describe(world.conversation_id, 999_999)

    # The same owner's attachment of another conversation, and an unsent one without a conversation.
    other = (await world.client.post("/api/conversations", json={"title": "other"})).json()["id"]
    theirs = int((await upload_ok(world.client, "o.txt", b"o\n", conversation_id=other))["id"])
    loose = int((await upload_ok(world.client, "loose.txt", b"l\n"))["id"])
    for foreign in (theirs, loose):
        with pytest.raises(LookupError, match="not available in this conversation"):
            await world.reader.read(world.conversation_id, foreign, 0, 10)

    # Another user's attachment is unknown here, and this conversation is unknown to them.
    bob = await new_user(world.base_url, "bob")
    bobs = int((await upload_ok(bob, "b.txt", b"b\n"))["id"])
    bob_conversation = (await bob.post("/api/conversations", json={"title": "b"})).json()["id"]
    await bob.aclose()
    with pytest.raises(LookupError):
        await world.reader.describe(world.conversation_id, bobs)
    with pytest.raises(LookupError):
        await world.reader.describe(bob_conversation, mine)


async def test_a_fork_reads_attachments_sent_before_the_fork_point(world: AttachmentWorld) -> None:
    before = await world.attach("before.txt", b"before\n")
    at = await _send(world, [before])
    after = await world.attach("after.txt", b"after\n")
    await _send(world, [after])
    fork = await world.client.post(
        f"/api/conversations/{world.conversation_id}/fork", json={"message_id": at}
    )
    fork_id = fork.json()["id"]
    assert (await world.reader.read(fork_id, before, 0, 100)).text == "before\n"
    with pytest.raises(LookupError):
        await world.reader.describe(fork_id, after)


async def test_reader_pages_by_character_offset(world: AttachmentWorld) -> None:
    rng = random.Random(3)
    alphabet = "aé日🚀\n "
    text = "".join(rng.choice(alphabet) for _ in range(300_000))
    ident = await world.attach("chars.txt", text.encode())
    ref = await world.reader.describe(world.conversation_id, ident)
    assert ref.extracted_chars == len(text) and ref.kind == "text"
    for offset in [0, 1, 4095, 4096, 4097, 150_000, len(text) - 5, len(text)]:
        for limit in [0, 1, 3, 5000]:
            page = await world.reader.read(world.conversation_id, ident, offset, limit)
            assert page.text == text[offset : offset + limit]
            assert page.next_offset == offset + len(page.text) and page.total_chars == len(text)
            assert page.has_more == (page.next_offset < len(text))
    assert await world.reader.tail(world.conversation_id, ident, 7) == text[-7:]
    assert await world.reader.tail(world.conversation_id, ident, 10**9) == text


async def test_reader_refuses_text_it_does_not_have(world: AttachmentWorld) -> None:
    broken = await world.attach("broken.docx", corrupt(docx_bytes(["paragraph"] * 200)))
    with pytest.raises(LookupError, match="has no extracted text"):
        await world.reader.read(world.conversation_id, broken, 0, 10)
    image = await world.attach("pixel.png", PNG_1X1)
    ref = await world.reader.describe(world.conversation_id, image)
    assert ref.kind == "image" and ref.extracted_chars == 0
    assert (await world.reader.read(world.conversation_id, image, 0, 10)).text == ""


async def test_link_validation_is_atomic(world: AttachmentWorld) -> None:
    good = await world.attach("g.txt", b"g\n")
    async with transaction(world.sessions) as db:
        conversation = await db.get_one(Conversation, world.conversation_id)
        user = await db.get_one(User, conversation.owner_id)
        message = Message(conversation_id=conversation.id, message_id=1, role=Role.USER, content="x")
        db.add(message)
        await db.flush()
        with pytest.raises(NotFound):
            await attachments.link_to_message(db, user, conversation, message, [good, 424242])
        assert (await attachments.get_owned(db, user, good)).message_pk is None
