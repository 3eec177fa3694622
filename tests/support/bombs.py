"""Hostile attachment files the tests build themselves (no fixtures on disk): a spreadsheet that
declares the whole grid, OOXML zip bombs, a zip of very many entries, deeply nested HTML, a PDF
of empty pages."""

from __future__ import annotations

import io
import re
import struct
import zipfile
from collections.abc import Callable

import openpyxl

from tests.support.files import docx_bytes, pdf_bytes, xlsx_bytes

MB = 1024 * 1024
WHOLE_GRID = "A1:XFD1048576"
# The real cells of the dimension bomb: the first and last row of the grid, and its last column.
BOMB_CELLS = {"A1": "alpha", "B2": "beta", "XFD1048576": "gamma"}
_PARAGRAPH = b"<w:p><w:r><w:t>bomb</w:t></w:r></w:p>"
_ROW = b'<row r="1"><c r="A1" t="inlineStr"><is><t>bomb</t></is></c></row>'


def xlsx_dimension_bomb(cells: dict[str, str] = BOMB_CELLS, dimension: str = WHOLE_GRID) -> bytes:
    """An XLSX of a few real cells whose sheet declares `dimension` (about 5 KB)."""
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    for coordinate, value in cells.items():
        sheet[coordinate] = value
    out = io.BytesIO()
    workbook.save(out)
    declared = f'<dimension ref="{dimension}"/>'.encode()
    return _rewrite(
        out.getvalue(),
        "xl/worksheets/sheet1.xml",
        lambda xml: re.sub(rb"<dimension ref=\"[^\"]*\"/>", declared, xml),
    )


def docx_zip_bomb(unpacked_bytes: int) -> bytes:
    """A valid DOCX whose `word/document.xml` unpacks to about `unpacked_bytes` of small
    paragraphs (python-docx would build an element tree of them all), deflated about 340:1."""
    return _inflated(docx_bytes(["cover"]), "word/document.xml", b"<w:body>", _PARAGRAPH, unpacked_bytes)


def xlsx_zip_bomb(unpacked_bytes: int) -> bytes:
    """A valid XLSX whose sheet unpacks to about `unpacked_bytes` of one repeated row."""
    return _inflated(
        xlsx_bytes({"Sheet": [["cover"]]}), "xl/worksheets/sheet1.xml", b"<sheetData>", _ROW, unpacked_bytes
    )


def _inflated(template: bytes, member: str, marker: bytes, filler: bytes, unpacked_bytes: int) -> bytes:
    """`template` with `filler` repeated after `marker` in `member` until it unpacks to about
    `unpacked_bytes`, streamed through the compressor (a gigabyte never sits in memory)."""
    source = zipfile.ZipFile(io.BytesIO(template))
    head, tail = source.read(member).split(marker, 1)
    chunk = filler * (MB // len(filler))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb:
        for info in source.infolist():
            if info.filename != member:
                bomb.writestr(info.filename, source.read(info.filename))
        with bomb.open(member, "w", force_zip64=unpacked_bytes > 2**31 - MB) as entry:
            entry.write(head + marker)
            for _ in range(max(1, unpacked_bytes // len(chunk))):
                entry.write(chunk)
            entry.write(tail)
    return out.getvalue()


def docx_with_lying_sizes(declared_bytes: int = 50_000, unpacked_bytes: int = 8 * MB) -> bytes:
    """A DOCX bomb whose zip directory declares `document.xml` far smaller than it inflates to."""
    data = bytearray(docx_zip_bomb(unpacked_bytes))
    name = b"word/document.xml"
    at = data.find(b"PK\x01\x02")  # the central directory's first record
    while at != -1:
        name_length = struct.unpack_from("<H", data, at + 28)[0]
        if bytes(data[at + 46 : at + 46 + name_length]) == name:
            struct.pack_into("<I", data, at + 24, declared_bytes)  # the uncompressed size
            return bytes(data)
        at = data.find(b"PK\x01\x02", at + 46)
    raise AssertionError("no document.xml in the central directory")


def many_entries_zip(entries: int) -> bytes:
    """A plain zip of `entries` empty members (about 85 bytes each): listing its directory, as
    type detection does, costs memory in proportion."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for number in range(entries):
            archive.writestr(zipfile.ZipInfo(f"{number:x}"), b"")
    return out.getvalue()


def nested_html(size_bytes: int) -> bytes:
    """An HTML page of about `size_bytes` that is one chain of unclosed <div>s, each inside the
    last (the parser builds a tree as deep as the page is long)."""
    opening = b"<html><body>"
    return opening + b"<div>" * ((size_bytes - len(opening) - 4) // 5) + b"deep"


def empty_pages_pdf(pages: int = 10_000) -> bytes:
    """A valid PDF of `pages` pages without text (about 270 bytes a page)."""
    return pdf_bytes([""] * pages)


def _rewrite(data: bytes, member: str, change: Callable[[bytes], bytes]) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            body = source.read(info.filename)
            target.writestr(info.filename, change(body) if info.filename == member else body)
    return out.getvalue()
