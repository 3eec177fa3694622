"""Builders of realistic attachment files, made with the libraries themselves (no fixtures on
disk): PDFs with a real text layer, DOCX, XLSX, big deterministic logs, and damaged copies."""

from __future__ import annotations

import io
import random
from collections.abc import Sequence

import docx
import openpyxl
from PIL import Image

MB = 1024 * 1024


def _pdf_string(text: str) -> bytes:
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return b"(" + escaped.encode("latin-1", "replace") + b")"


def pdf_bytes(pages: Sequence[str]) -> bytes:
    """A valid PDF (Helvetica text layer, correct xref) with one page per string."""
    font_id, first_page_id = 3, 4
    page_ids = [first_page_id + 2 * index for index in range(len(pages))]
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids ["
        + b" ".join(f"{pid} 0 R".encode() for pid in page_ids)
        + f"] /Count {len(pages)} >>".encode(),
        font_id: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    }
    for page_id, text in zip(page_ids, pages, strict=True):
        lines = text.split("\n")
        ops = [b"BT /F1 10 Tf 12 TL 40 800 Td"]
        for number, line in enumerate(lines):
            ops.append((b"T* " if number else b"") + _pdf_string(line) + b" Tj")
        ops.append(b"ET")
        stream = b"\n".join(ops)
        objects[page_id] = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842]"
            f" /Resources << /Font << /F1 {font_id} 0 R >> >> /Contents {page_id + 1} 0 R >>"
        ).encode()
        objects[page_id + 1] = f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream"
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets: dict[int, int] = {}
    for object_id in sorted(objects):
        offsets[object_id] = out.tell()
        out.write(f"{object_id} 0 obj\n".encode() + objects[object_id] + b"\nendobj\n")
    xref_at = out.tell()
    count = max(objects) + 1
    out.write(f"xref\n0 {count}\n0000000000 65535 f \n".encode())
    for object_id in range(1, count):
        out.write(f"{offsets[object_id]:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {count} /Root 1 0 R >>\nstartxref\n{xref_at}\n%%EOF\n".encode())
    return out.getvalue()


def report_page_text(number: int, lines: int = 40) -> str:
    rng = random.Random(number)
    body = [
        f"Quarterly report, page {number}: section {number}.{line} revenue {rng.randint(1000, 99999)} EUR"
        for line in range(1, lines + 1)
    ]
    return "\n".join([f"PAGE-MARKER-{number:03d}", *body])


def thirty_page_pdf() -> bytes:
    """The end-to-end scenario's PDF: 30 pages, each opening with `PAGE-MARKER-nnn`."""
    return pdf_bytes([report_page_text(number) for number in range(1, 31)])


def log_bytes(size: int = 2 * MB, seed: int = 7) -> bytes:
    """A deterministic application log of exactly `size` bytes. Every 997th line is an ERROR
    with a unique `incident=INC-nnnnn` the model can be asked to find."""
    rng = random.Random(seed)
    lines: list[str] = []
    total = 0
    number = 0
    while total < size:
        number += 1
        day, clock = (
            1 + number // 86400 % 28,
            f"{number // 3600 % 24:02d}:{number // 60 % 60:02d}:{number % 60:02d}",
        )
        stamp = f"2024-03-{day:02d} {clock}"
        if number % 997 == 0:
            order = rng.randint(10**5, 10**6)
            line = f"{stamp} ERROR payment failed incident=INC-{number:05d} order={order}\n"
        else:
            line = (
                f"{stamp} INFO request id={rng.getrandbits(32):08x} path=/api/items/{rng.randint(1, 9999)}"
                f" status=200 duration_ms={rng.randint(1, 900)}\n"
            )
        lines.append(line)
        total += len(line)
    data = "".join(lines).encode()
    return data[: size - 1] + b"\n"


def docx_bytes(paragraphs: Sequence[str], table: Sequence[Sequence[str]] = ()) -> bytes:
    document = docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx_bytes(sheets: dict[str, Sequence[Sequence[object]]]) -> bytes:
    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for title, rows in sheets.items():
        sheet = workbook.create_sheet(title)
        for row in rows:
            sheet.append(list(row))
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def corrupt(data: bytes) -> bytes:
    """The first half of a file: its signature intact, its structure broken."""
    return data[: len(data) // 2]


PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360606060000000050001a5f645400000000049454e44ae426082"
)


def picture_png(width: int = 96, height: int = 64) -> bytes:
    """A small PNG one can see (a two-way colour gradient), for screenshots of image messages."""
    image = Image.new("RGB", (width, height))
    image.putdata([(255 * x // width, 255 * y // height, 160) for y in range(height) for x in range(width)])
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
