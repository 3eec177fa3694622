"""Attachment endpoints over real HTTP: upload, metadata, download, text pages, delete,
ownership, limits and bad input."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from backend.app import create_app
from backend.settings import Settings
from tests.support.api import new_user
from tests.support.files import PNG_1X1, corrupt, docx_bytes, pdf_bytes, xlsx_bytes
from tests.support.servers import serve
from tests.support.uploads import CONTENT_TYPE, multipart_body, upload, upload_ok


def stored_files(data_dir: Path) -> list[Path]:
    return sorted(p for p in (data_dir / "attachments").rglob("*") if p.is_file())


async def test_upload_read_download_delete(alice: httpx.AsyncClient, tmp_path: Path) -> None:
    data = "# Plan\n\nShip the **beta** on Friday. Ünïcödé ✓\n".encode()
    made = await upload_ok(alice, "plan.md", data)
    assert made["status"] == "ready" and made["kind"] == "markdown"
    assert made["mime_type"] == "text/markdown"
    assert made["size_bytes"] == len(data) and made["sha256"] == hashlib.sha256(data).hexdigest()
    assert made["extracted_chars"] == len(data.decode()) and made["truncated_at_parse"] is False
    assert made["sent"] is False and made["conversation_id"] is None

    meta = (await alice.get(f"/api/attachments/{made['id']}")).json()
    assert meta == made

    download = await alice.get(made["download_url"])
    assert download.status_code == 200 and download.content == data
    assert download.headers["content-disposition"] == 'attachment; filename="plan.md"'
    assert download.headers["x-content-type-options"] == "nosniff"

    page = (await alice.get(f"/api/attachments/{made['id']}/text", params={"offset": 8, "limit": 4})).json()
    assert page["text"] == "Ship" and page["next_offset"] == 12 and page["has_more"] is True
    assert page["total_chars"] == made["extracted_chars"]

    assert (await alice.delete(f"/api/attachments/{made['id']}")).status_code == 204
    for path in ("", "/download", "/text"):
        gone = await alice.get(f"/api/attachments/{made['id']}{path}")
        assert gone.status_code == 404 and gone.json()["code"] == "not_found"
    assert stored_files(tmp_path / "data") == []


async def test_other_users_attachments_are_not_found(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    made = await upload_ok(alice, "secret.txt", b"the launch code is 0000\n")
    for method, path in [
        ("GET", ""),
        ("GET", "/download"),
        ("GET", "/text"),
        ("DELETE", ""),
    ]:
        response = await bob.request(method, f"/api/attachments/{made['id']}{path}")
        assert response.status_code == 404 and response.json()["code"] == "not_found", (method, path)
    assert (
        await alice.get(f"/api/attachments/{made['id']}/download")
    ).content == b"the launch code is 0000\n"


async def test_out_of_range_ids_are_rejected_not_crashing(alice: httpx.AsyncClient) -> None:
    huge = 2**70
    for method, path in [
        ("GET", f"/api/attachments/{huge}"),
        ("GET", f"/api/attachments/{huge}/text"),
        ("DELETE", f"/api/attachments/{huge}"),
        ("GET", "/api/attachments/0"),
    ]:
        assert (await alice.request(method, path)).status_code == 422, path
    assert (await upload(alice, "a.txt", b"x", conversation_id=huge)).status_code == 422


async def test_upload_needs_login_and_csrf(alice: httpx.AsyncClient, anonymous: httpx.AsyncClient) -> None:
    body = multipart_body("a.txt", b"x")
    assert (
        await anonymous.post("/api/attachments", content=body, headers={"Content-Type": CONTENT_TYPE})
    ).status_code == 401
    no_csrf = await alice.post(
        "/api/attachments", content=body, headers={"Content-Type": CONTENT_TYPE, "X-CSRF-Token": ""}
    )
    assert no_csrf.status_code == 403 and no_csrf.json()["code"] == "csrf_failed"


async def test_malformed_requests(alice: httpx.AsyncClient, tmp_path: Path) -> None:
    not_multipart = await alice.post("/api/attachments", json={"file": "x"})
    assert not_multipart.status_code == 415
    no_file = await alice.post(
        "/api/attachments",
        content=b"--"
        + b"b" * 8
        + b'\r\nContent-Disposition: form-data; name="other"\r\n\r\nx\r\n--'
        + b"b" * 8
        + b"--\r\n",
        headers={"Content-Type": "multipart/form-data; boundary=" + "b" * 8},
    )
    assert no_file.status_code == 422 and no_file.json()["code"] == "file_missing"
    cut_short = await alice.post(
        "/api/attachments",
        content=multipart_body("a.txt", b"hello")[:-20],
        headers={"Content-Type": CONTENT_TYPE},
    )
    assert cut_short.status_code == 422
    assert stored_files(tmp_path / "data") == []


async def test_zero_byte_file(alice: httpx.AsyncClient) -> None:
    made = await upload_ok(alice, "empty.txt", b"")
    assert made["status"] == "ready" and made["kind"] == "empty" and made["size_bytes"] == 0
    assert made["mime_type"] == "application/x-empty" and made["note"] == "empty file (0 bytes)"
    page = (await alice.get(f"/api/attachments/{made['id']}/text")).json()
    assert page["text"] == "" and page["total_chars"] == 0 and page["has_more"] is False
    assert (await alice.get(made["download_url"])).content == b""


@pytest.mark.parametrize(
    ("filename", "data", "mime", "kind"),
    [
        ("notes.txt", PNG_1X1, "image/png", "image"),
        ("photo.jpg", b"just some words\nand more words\n", "text/plain", "text"),
        ("data.csv", pdf_bytes(["Hello from a PDF"]), "application/pdf", "pdf"),
        (
            "report.pdf",
            docx_bytes(["A Word document"]),
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "docx",
        ),
        ("table.txt", b"name;qty;price\napple;3;1.20\npear;5;0.80\nplum;7;2.10\n", "text/csv", "table"),
        ("README", b"\x7fELF\x02\x01\x01\x00" + bytes(200), "application/x-executable", "binary"),
        ("page.txt", b"<!DOCTYPE html><html><body><p>hi</p></body></html>", "text/html", "html"),
        ("blob.txt", bytes(range(256)) * 4, "application/octet-stream", "binary"),
    ],
)
async def test_type_is_detected_by_content_not_name(
    alice: httpx.AsyncClient, filename: str, data: bytes, mime: str, kind: str
) -> None:
    made = await upload_ok(alice, filename, data)
    assert (made["mime_type"], made["kind"]) == (mime, kind)
    assert made["filename"] == filename
    if kind in ("image", "binary"):
        assert made["extracted_chars"] == 0 and "no text extracted" in made["note"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"../../etc/passwd", "passwd"),
        (b"..\\..\\windows\\system32\\evil.txt", "evil.txt"),
        (b"..", "unnamed"),
        (b"   ", "unnamed"),
        (b"", "unnamed"),
        (b"a\x01b\x1fc\x7f.txt", "abc.txt"),
        (b"tab\there  spaced.txt", "tab here spaced.txt"),
        ("invoice\u202egpj.exe".encode(), "invoicegpj.exe"),
        ("名前 ✓.txt".encode(), "名前 ✓.txt"),
        (b"x" * 300 + b".txt", "x" * 196 + ".txt"),
    ],
)
async def test_filenames_are_sanitized(
    alice: httpx.AsyncClient, tmp_path: Path, raw: bytes, expected: str
) -> None:
    made = await upload_ok(alice, raw, b"content\n")
    assert made["filename"] == expected
    download = await alice.get(made["download_url"])
    assert download.status_code == 200 and download.content == b"content\n"
    assert "\n" not in download.headers["content-disposition"]
    # The bytes live under the owner's directory, under a generated name, whatever the name said.
    files = stored_files(tmp_path / "data")
    assert [f.name for f in files] == ["original"]
    assert files[0].resolve().is_relative_to((tmp_path / "data" / "attachments").resolve())


async def test_non_ascii_download_name(alice: httpx.AsyncClient) -> None:
    made = await upload_ok(alice, 'résumé "final".txt', b"cv\n")
    disposition = (await alice.get(made["download_url"])).headers["content-disposition"]
    assert disposition == "attachment; filename*=utf-8''r%C3%A9sum%C3%A9%20%22final%22.txt"


async def test_corrupt_pdf_and_docx_are_stored_and_failed(alice: httpx.AsyncClient) -> None:
    for filename, data, what in [
        ("broken.pdf", corrupt(pdf_bytes(["page one", "page two"] * 20)), "PDF"),
        ("broken.docx", corrupt(docx_bytes(["paragraph"] * 200)), "DOCX"),
        ("broken.xlsx", corrupt(xlsx_bytes({"S": [[i, i * 2] for i in range(500)]})), "XLSX"),
    ]:
        made = await upload_ok(alice, filename, data)
        assert made["status"] == "failed", filename
        assert f"the {what} could not be read" in made["parse_notes"]["error"]
        assert made["note"].startswith("text extraction failed")
        assert "/" not in made["parse_notes"]["error"]  # no server paths in what users see
        assert (await alice.get(made["download_url"])).content == data
        text = await alice.get(f"/api/attachments/{made['id']}/text")
        assert text.status_code == 409 and text.json()["code"] == "attachment_has_no_text"


async def test_documents_are_extracted(alice: httpx.AsyncClient) -> None:
    pdf = await upload_ok(alice, "r.pdf", pdf_bytes(["Alpha (page one)", "Beta page two"]))
    assert pdf["parse_notes"]["pages"] == 2
    pdf_text = (await alice.get(f"/api/attachments/{pdf['id']}/text")).json()["text"]
    assert pdf_text.startswith("[Page 1/2]\nAlpha (page one)") and "[Page 2/2]\nBeta page two" in pdf_text

    doc = await upload_ok(
        alice, "d.docx", docx_bytes(["Intro line", "Second"], table=[["k", "v"], ["a", "1"]])
    )
    doc_text = (await alice.get(f"/api/attachments/{doc['id']}/text")).json()["text"]
    assert doc_text == "Intro line\nSecond\nk\tv\na\t1\n"

    sheet = await upload_ok(
        alice, "s.xlsx", xlsx_bytes({"Q1": [["item", "qty"], ["bolts", 40]], "Q2": [["nuts", 7]]})
    )
    assert sheet["parse_notes"].get("sheets") == ["Q1", "Q2"], sheet
    assert sheet["parse_notes"]["rows"] == 3
    sheet_text = (await alice.get(f"/api/attachments/{sheet['id']}/text")).json()["text"]
    assert sheet_text == "[Sheet: Q1]\nitem\tqty\nbolts\t40\n\n[Sheet: Q2]\nnuts\t7\n\n"

    html = await upload_ok(
        alice,
        "p.html",
        b"<html><head><title>T</title><style>p{}</style></head><body><h1>Head</h1>"
        b"<script>alert(1)</script><p>Body text</p></body></html>",
    )
    assert (await alice.get(f"/api/attachments/{html['id']}/text")).json()["text"] == "T\n\nHead\nBody text\n"

    data = b'{"items": [1, 2, 3], "name": "x"}'
    js = await upload_ok(alice, "payload.bin", data)
    assert js["kind"] == "json" and js["mime_type"] == "application/json"
    tsv = await upload_ok(alice, "t.tsv", b"a\tb\n1\t2\n")
    assert tsv["mime_type"] == "text/tab-separated-values" and tsv["parse_notes"]["rows"] == 2


@pytest.mark.parametrize(
    ("data", "text", "encoding"),
    [
        ("Grüße aus Köln, café crème.\n".encode("cp1252") * 20, "Grüße aus Köln, café crème.\n" * 20, None),
        ("UTF-16 text ✓\n".encode("utf-16"), "UTF-16 text ✓\n", "utf-16"),
        (b"\xef\xbb\xbfwith BOM\n", "with BOM\n", "utf-8-sig"),
    ],
)
async def test_encodings_are_detected(
    alice: httpx.AsyncClient, data: bytes, text: str, encoding: str | None
) -> None:
    made = await upload_ok(alice, "t.txt", data)
    assert made["status"] == "ready"
    assert (await alice.get(f"/api/attachments/{made['id']}/text", params={"limit": 100_000})).json()[
        "text"
    ] == text
    if encoding:
        assert made["parse_notes"]["encoding"] == encoding


async def test_invalid_bytes_never_crash(alice: httpx.AsyncClient) -> None:
    data = ("valid ünïcode line\n" * 5000).encode() + b"\xff\xfe\xc3(" + b"tail line\n" + b"\x00 NUL inside\n"
    made = await upload_ok(alice, "mixed.log", data)
    assert made["status"] == "ready" and made["parse_notes"]["replaced_chars"] >= 1
    end = made["extracted_chars"]
    tail = (await alice.get(f"/api/attachments/{made['id']}/text", params={"offset": end - 30})).json()[
        "text"
    ]
    assert tail.endswith("tail line\n\ufffd NUL inside\n")


async def test_large_text_pages_by_character_offset(alice: httpx.AsyncClient) -> None:
    # Multi-byte characters everywhere (1-4 UTF-8 bytes), long enough to live in an extract file.
    text = "".join(f"{i:06d} añ 日本 🚀 ok\n" for i in range(20_000))
    made = await upload_ok(alice, "wide.txt", text.encode())
    assert made["extracted_chars"] == len(text)
    pieces = []
    offset = 0
    while True:
        page = (
            await alice.get(f"/api/attachments/{made['id']}/text", params={"offset": offset, "limit": 77_777})
        ).json()
        pieces.append(page["text"])
        assert page["next_offset"] == offset + len(page["text"])
        offset = page["next_offset"]
        if not page["has_more"]:
            break
    assert "".join(pieces) == text
    past = (await alice.get(f"/api/attachments/{made['id']}/text", params={"offset": 10**9})).json()
    assert past["text"] == "" and past["has_more"] is False and past["offset"] == len(text)


async def test_duplicates_reuse_extraction_and_stay_independent(alice: httpx.AsyncClient) -> None:
    data = ("row,value\n" + "".join(f"{i},{i * i}\n" for i in range(20_000))).encode()
    first = await upload_ok(alice, "numbers.csv", data)
    second = await upload_ok(alice, "numbers.csv", data)
    assert first["id"] != second["id"] and first["sha256"] == second["sha256"]
    assert second["parse_notes"]["duplicate_of"] == first["id"]
    assert second["extracted_chars"] == first["extracted_chars"] and second["kind"] == "table"
    # Among text kinds the name decides (a .py file is code): then it is extracted afresh.
    script = b"print('hello')\n"
    as_text = await upload_ok(alice, "hello.txt", script)
    as_code = await upload_ok(alice, "hello.py", script)
    assert (as_text["kind"], as_code["kind"]) == ("text", "code")
    assert "duplicate_of" not in as_code["parse_notes"]
    assert (await alice.delete(f"/api/attachments/{first['id']}")).status_code == 204
    assert (await alice.get(second["download_url"])).content == data
    end = (await alice.get(f"/api/attachments/{second['id']}/text", params={"offset": len(data) - 12})).json()
    assert end["text"] == data.decode()[-12:]


async def test_upload_into_a_conversation(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient, tmp_path: Path
) -> None:
    cid = (await alice.post("/api/conversations", json={"title": "c"})).json()["id"]
    made = await upload_ok(alice, "a.txt", b"x\n", conversation_id=cid)
    assert made["conversation_id"] == cid
    query = await alice.post(
        "/api/attachments",
        params={"conversation_id": cid},
        content=multipart_body("b.txt", b"y\n"),
        headers={"Content-Type": CONTENT_TYPE},
    )
    assert query.status_code == 201 and query.json()["conversation_id"] == cid
    before = stored_files(tmp_path / "data")
    stolen = await upload(bob, "c.txt", b"z\n", conversation_id=cid)
    assert stolen.status_code == 404 and stolen.json()["code"] == "not_found"
    bad = await upload(alice, "d.txt", b"z\n", conversation_id="abc")  # type: ignore[arg-type]
    assert bad.status_code == 422
    assert stored_files(tmp_path / "data") == before


@pytest.fixture
async def small_limits(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> AsyncIterator[tuple[httpx.AsyncClient, Settings]]:
    settings = make_settings(sqlite_url, max_upload_bytes=200_000, max_extracted_chars=100_000)
    async with serve(create_app(settings)) as base_url:
        client = await new_user(base_url, "carol")
        yield client, settings
        await client.aclose()


@pytest.mark.parametrize("chunked", [False, True])
async def test_over_the_limit_is_413_and_nothing_is_stored(
    small_limits: tuple[httpx.AsyncClient, Settings], chunked: bool
) -> None:
    client, settings = small_limits
    for size in (200_001, 5_000_000):
        response = await upload(client, "big.bin", b"a" * size, chunked=chunked)
        assert response.status_code == 413
        assert response.json()["code"] == "upload_too_large"
    assert stored_files(settings.data_dir) == []
    # The limit itself is allowed, and the service keeps working after a rejected upload.
    at_limit = await upload_ok(client, "edge.txt", b"a" * 200_000)
    assert at_limit["size_bytes"] == 200_000


async def test_extraction_limit_truncates_with_a_note(
    small_limits: tuple[httpx.AsyncClient, Settings],
) -> None:
    client, _ = small_limits
    made = await upload_ok(client, "long.txt", b"0123456789\n" * 15_000)
    assert made["status"] == "ready" and made["truncated_at_parse"] is True
    assert made["extracted_chars"] == 100_000
    assert made["note"] == "text truncated at parse time after 100,000 characters"
    end = (await client.get(f"/api/attachments/{made['id']}/text", params={"offset": 99_990})).json()
    assert end["text"] == "0123456789" and end["truncated_at_parse"] is True and not end["has_more"]
