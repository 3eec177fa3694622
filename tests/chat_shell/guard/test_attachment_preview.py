"""Attachment previews (SPEC 5.2.2) over real uploads read through the package-mode reader."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from langchain_core.messages import HumanMessage

from backend.settings import Settings
from chat_shell.accounting.text_counter import TiktokenText
from chat_shell.accounting.token_counter import TokenCounter
from chat_shell.contracts import AttachmentPage, AttachmentReader, AttachmentRef
from chat_shell.guard.stages.attachment_preview.block import Shown, preview_parts, with_preview
from chat_shell.guard.stages.attachment_preview.previewer import AttachmentPreviewer
from chat_shell.messages.markers import markers, with_markers
from tests.support.attachments import AttachmentWorld, attachment_world, count_tokens
from tests.support.files import PNG_1X1, corrupt, docx_bytes, log_bytes, thirty_page_pdf

HEADER = re.compile(r"^\[Attachment (\d+)/(\d+) \| ID: (\d+) \|.*\| Truncated: (yes|no)\]$", re.M)

EXACT = TokenCounter(TiktokenText())


@pytest.fixture
async def world(sqlite_url: str, make_settings: Callable[..., Settings]) -> AsyncIterator[AttachmentWorld]:
    async with attachment_world(make_settings(sqlite_url)) as made:
        yield made


@dataclass
class RecordingReader:
    """Delegates to the real reader and records how many characters each call asked for."""

    inner: AttachmentReader
    requested: list[int] = field(default_factory=list)

    async def describe(self, conversation_id: int, attachment_id: int) -> AttachmentRef:
        return await self.inner.describe(conversation_id, attachment_id)

    async def read(
        self, conversation_id: int, attachment_id: int, offset: int, limit_chars: int
    ) -> AttachmentPage:
        self.requested.append(limit_chars)
        return await self.inner.read(conversation_id, attachment_id, offset, limit_chars)

    async def tail(self, conversation_id: int, attachment_id: int, chars: int) -> str:
        self.requested.append(chars)
        return await self.inner.tail(conversation_id, attachment_id, chars)


def previewer(
    world: AttachmentWorld, budget: int, reader: AttachmentReader | None = None
) -> AttachmentPreviewer:
    return AttachmentPreviewer(reader or world.reader, world.conversation_id, budget, EXACT)


async def test_small_attachments_are_shown_whole(world: AttachmentWorld) -> None:
    notes = "Meeting notes\n- ship on Friday\n- budget 12,400 EUR\n"
    code = "def add(a, b):\n    return a + b\n"
    ids = [await world.attach("notes.md", notes.encode()), await world.attach("add.py", code.encode())]
    rendered = await previewer(world, 15_000).render(ids)
    assert rendered.text.startswith(f'<attachments count="2">\nIDs: {ids[0]}, {ids[1]}\n')
    assert notes.rstrip("\n") in rendered.text and code.rstrip("\n") in rendered.text
    assert [m[3] for m in HEADER.findall(rendered.text)] == ["no", "no"]
    assert f"| Tokens: {count_tokens(notes)} |" in rendered.text
    assert "read_attachment" not in rendered.text
    assert rendered.stats.shown_whole == 2
    assert count_tokens(rendered.text) <= rendered.stats.preview_tokens <= 15_000


async def test_water_filling_smallest_first_with_head_and_tail(world: AttachmentWorld) -> None:
    small = "tiny file\n" * 3
    medium = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(100))
    log = log_bytes()
    ids = [
        await world.attach("server.log", log),
        await world.attach("small.txt", small.encode()),
        await world.attach("medium.txt", medium.encode()),
    ]
    budget = 4_000
    reader = RecordingReader(world.reader)
    rendered = await previewer(world, budget, reader).render(ids)
    text = rendered.text
    assert count_tokens(text) <= budget
    # In the message's order; the small ones whole, the log cut.
    assert [(int(m[0]), int(m[2]), m[3]) for m in HEADER.findall(text)] == [
        (1, ids[0], "yes"),
        (2, ids[1], "no"),
        (3, ids[2], "no"),
    ]
    assert small.rstrip("\n") in text and medium.rstrip("\n") in text
    full = log.decode()
    marker = re.search(r"\[\.\.\. ([\d,]+) characters omitted \(offsets ([\d,]+) to ([\d,]+)\);", text)
    assert marker is not None
    head_end, tail_start = (int(marker[2].replace(",", "")), int(marker[3].replace(",", "")))
    head = text[text.index("| Truncated: yes]\n") + len("| Truncated: yes]\n") : marker.start()]
    assert full.startswith(head) and len(head.rstrip("\n")) <= head_end
    tail_block = text[marker.end() :].split("\n", 1)[1]
    tail = tail_block[: tail_block.index("\n(Log preview")]
    assert full[tail_start:].rstrip("\n") == tail and tail.endswith(full.rstrip("\n")[-40:])
    # The head ends and the tail starts on line boundaries; the hint says where to continue.
    assert full[head_end - 1] == "\n" and full[tail_start - 1] == "\n"
    assert f"read_attachment(attachment_id={ids[0]}, offset={head_end}, limit=...)" in text
    assert "Log preview" in text and "newest entries are at the end" in text
    # Only the head and tail of the 2 MB log were read, never the whole text.
    assert max(reader.requested) < 100_000 and sum(reader.requested) < 200_000
    assert rendered.stats.truncated == 1 and rendered.stats.source_tokens > 500_000


async def test_type_aware_hints(world: AttachmentWorld) -> None:
    csv = "id,name,amount\n" + "".join(f"{i},item {i},{i * 3}\n" for i in range(5_000))
    payload = json.dumps({"records": [{"id": i, "value": "x" * 20} for i in range(2_000)]})
    source = "".join(f"def handler_{i}(event):\n    return {i}\n\n" for i in range(2_000))
    ids = [
        await world.attach("report.pdf", thirty_page_pdf()),
        await world.attach("sales.csv", csv.encode()),
        await world.attach("data.json", payload.encode()),
        await world.attach("handlers.py", source.encode()),
    ]
    text = (await previewer(world, 6_000).render(ids)).text
    assert count_tokens(text) <= 6_000
    ref = await world.reader.describe(world.conversation_id, ids[0])
    per_page = ref.extracted_chars // 30
    assert "PDF preview: 30 pages, each starting at a '[Page n/30]' line" in text
    assert f"read_attachment(attachment_id={ids[0]}, offset=(n-1)*{per_page}, limit=...)" in text
    assert "[Page 1/30]\nPAGE-MARKER-001" in text
    assert "Table preview: the header row and the first and last rows of 5,001 rows" in text
    assert "id,name,amount\n0,item 0,0" in text
    assert "JSON preview: cut in the middle" in text
    assert "Source preview" in text


async def test_files_without_text_get_a_header_and_a_note(world: AttachmentWorld) -> None:
    ids = [
        await world.attach("photo.png", PNG_1X1),
        await world.attach("empty.txt", b""),
        await world.attach("blob.bin", bytes(range(256)) * 8),
        await world.attach("broken.docx", corrupt(docx_bytes(["paragraph"] * 200))),
        await world.attach("gone.txt", b"soon deleted\n"),
    ]
    # A sent attachment deleted later: the reader says so (unsent ones are simply unknown).
    await world.client.delete(f"/api/attachments/{ids[4]}")
    text = (await previewer(world, 2_000).render(ids)).text
    assert "(Image: stored, no text extracted. You cannot see its content" in text
    assert "(Empty file: 0 bytes.)" in text
    assert "(Binary file: stored, no text extracted" in text
    assert "(Text extraction failed: text extraction failed: the DOCX could not be read" in text
    assert f"[Attachment 5/5 | ID: {ids[4]} | unavailable]\n(Not available: attachment {ids[4]}" in text
    assert [m[3] for m in HEADER.findall(text)] == ["no"] * 4
    assert "read_attachment" not in text


async def test_one_hundred_attachments_stay_within_budget(world: AttachmentWorld) -> None:
    body = "".join(f"record {i}: value {i * 7}\n" for i in range(400)).encode()
    ids = [await world.attach(f"part-{n:03d}.txt", body) for n in range(100)]
    wide = await previewer(world, 15_000).render(ids)
    assert count_tokens(wide.text) <= 15_000
    assert len(HEADER.findall(wide.text)) == 100 and "record 0: value 0" not in wide.text
    assert "Only headers are shown for 100 of 100 attachments" in wide.text
    assert wide.stats.header_only == 100

    narrow = await previewer(world, 2_048).render(ids)
    assert count_tokens(narrow.text) <= 2_048
    assert "Too many attachments to preview within the budget" in narrow.text
    listed = re.findall(r"^- ID (\d+): part-", narrow.text, re.M)
    more = re.search(r"^- \.\.\. and (\d+) more \(IDs (\d+) to (\d+)\)$", narrow.text, re.M)
    assert more is not None and len(listed) + int(more[1]) == 100
    assert [int(i) for i in listed] == ids[: len(listed)] and int(more[3]) == ids[-1]


async def test_rendering_is_deterministic(world: AttachmentWorld) -> None:
    ids = [
        await world.attach("server.log", log_bytes(300_000, seed=1)),
        await world.attach("report.pdf", thirty_page_pdf()),
        await world.attach("notes.txt", "día 🚀 ok\n".encode() * 50),
    ]
    first = await previewer(world, 5_000).render(ids)
    second = await previewer(world, 5_000).render(ids)
    assert first.text.encode() == second.text.encode()
    assert count_tokens(first.text) <= 5_000


async def test_a_message_shows_its_preview_in_front_of_what_the_user_wrote(world: AttachmentWorld) -> None:
    ident = await world.attach("a.txt", b"alpha\n")
    message = with_markers(HumanMessage("What is in the file?", id="u1"), attachment_ids=[ident])
    assert preview_parts(message) == Shown(None, (), "What is in the file?")
    block = (await previewer(world, 1_000).render([ident])).text
    shown = with_preview(message, block, "What is in the file?")
    assert shown.id == "u1" and shown.content == f"{block}\n\nWhat is in the file?"
    found = markers(shown)
    assert found.attachment_preview is True and found.attachment_preview_chars == len(block)
    assert found.attachment_ids == [ident]
    assert preview_parts(shown) == Shown(block, (), "What is in the file?")
    # A user text that itself contains a closing tag does not confuse the split.
    tricky = with_preview(message, block, "</attachments>\n\nsee above")
    assert preview_parts(tricky) == Shown(block, (), "</attachments>\n\nsee above")
    # List content keeps its parts after the preview part.
    parts = [{"type": "text", "text": "q"}]
    listed = with_preview(HumanMessage(parts, id="u3"), block, parts)
    assert listed.content == [{"type": "text", "text": block}, {"type": "text", "text": "q"}]
    assert preview_parts(listed) == Shown(block, (), parts)
    # A marked message whose content another stage rewrote is not split.
    rewritten = shown.model_copy(update={"content": "[cut] " + str(shown.content)})
    assert preview_parts(rewritten) is None
    # Pictures sit between the block and the user's words, which become a text part.
    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    pictured = with_preview(message, block, "What is in the file?", (picture,))
    own = [{"type": "text", "text": "What is in the file?"}]
    assert pictured.content == [{"type": "text", "text": block}, picture, *own]
    assert markers(pictured).attachment_preview_images == 1
    assert preview_parts(pictured) == Shown(block, (picture,), own)
