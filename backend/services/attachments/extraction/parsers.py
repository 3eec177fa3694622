"""Text extraction per kind of file. Each parser streams text into an `ExtractWriter`, stops
once the writer is full, and returns facts for the parse notes (pages, rows, encoding...).

Parsers run on untrusted files, inside the sandbox's worker processes: a parser that cannot
read its input raises `ExtractionFailed` with a reason a user can understand, and one whose input
is past a limit raises `ExtractionStopped` before parsing it; invalid bytes in text never raise.
Running out of memory is the sandbox's limit, not damage: MemoryError always propagates.
"""

from __future__ import annotations

import codecs
import pyexpat
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import docx
import openpyxl
import PIL.Image
from bs4 import BeautifulSoup
from docx.table import Table
from lxml import etree
from pypdf import PdfReader

from backend.services.attachments.extraction.detection import DetectedType
from backend.services.attachments.extraction.errors import ExtractionFailed
from backend.services.attachments.extraction.limits import (
    ExtractionLimits,
    check_html_size,
    check_package,
    check_pdf_pages,
)
from backend.services.attachments.extraction.store import ExtractWriter

READ_CHUNK = 1024 * 1024
Notes = dict[str, Any]
_BLANK_RUNS = re.compile(r"\n[ \t\r\f\v]*(?:\n[ \t\r\f\v]*)+")


@contextmanager
def _reading(what: str, path: Path) -> Iterator[None]:
    """A library's error on a damaged file becomes `ExtractionFailed` naming the file type."""
    try:
        yield
    except (ExtractionFailed, MemoryError):
        raise
    except Exception as exc:  # zipfile, lxml, pypdf and openpyxl raise many types on damaged files
        if _out_of_memory(exc):
            raise MemoryError from exc
        raise ExtractionFailed(f"the {what} could not be read ({_describe(exc, path)})") from exc


def _out_of_memory(exc: Exception) -> bool:
    """The XML parsers report a failed allocation as a parse error, not as MemoryError."""
    if isinstance(exc, etree.LxmlError):
        return any(entry.type == etree.ErrorTypes.ERR_NO_MEMORY for entry in exc.error_log)
    # expat's errors (openpyxl parses sheets with xml.etree) carry its error code
    return (
        isinstance(exc, (ElementTree.ParseError, pyexpat.ExpatError))
        and exc.code == pyexpat.errors.codes[pyexpat.errors.XML_ERROR_NO_MEMORY]
    )


def _decoded_chunks(path: Path, encoding: str) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    with path.open("rb") as handle:
        while data := handle.read(READ_CHUNK):
            yield decoder.decode(data)
    yield decoder.decode(b"", final=True)


def parse_text(path: Path, detected: DetectedType, writer: ExtractWriter, limits: ExtractionLimits) -> Notes:
    """Plain text, code, Markdown, logs, CSV/TSV and JSON: the decoded text as it is."""
    encoding = detected.encoding or "utf-8"
    replaced = lines = 0
    last = ""
    for chunk in _decoded_chunks(path, encoding):
        replaced += chunk.count("\ufffd")
        lines += chunk.count("\n")
        last = chunk[-1:] or last
        if not writer.write(chunk):
            break
    notes: Notes = {"encoding": _encoding_name(encoding)}
    if replaced:
        notes["replaced_chars"] = replaced
    if detected.kind == "table":
        notes["rows"] = lines + (1 if last not in ("", "\n") else 0)
    return notes


def parse_html(path: Path, detected: DetectedType, writer: ExtractWriter, limits: ExtractionLimits) -> Notes:
    """The visible text of an HTML page: no markup, scripts or styles."""
    check_html_size(path, limits)
    encoding = detected.encoding or "utf-8"
    markup = "".join(_decoded_chunks(path, encoding))
    soup = BeautifulSoup(markup, "html.parser")
    title = soup.title.get_text(strip=True) if soup.title else ""
    for hidden in soup(["script", "style", "noscript", "template", "head"]):
        hidden.decompose()
    text = _BLANK_RUNS.sub("\n\n", soup.get_text("\n")).strip()
    writer.write(f"{title}\n\n{text}\n" if title else f"{text}\n")
    return {"encoding": _encoding_name(encoding)}


def parse_pdf(path: Path, detected: DetectedType, writer: ExtractWriter, limits: ExtractionLimits) -> Notes:
    """Page by page, each page opened by a `[Page n/N]` line the model can navigate by."""
    with _reading("PDF", path):
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise ExtractionFailed("the PDF is password-protected")
        pages = reader.pages
        total = len(pages)
    check_pdf_pages(total, limits)
    unreadable: list[int] = []
    empty = 0
    for number in range(1, total + 1):
        try:
            text = (pages[number - 1].extract_text() or "").strip()
        except MemoryError:
            raise
        except Exception:  # one damaged page must not lose the others
            unreadable.append(number)
            text = "(this page could not be read)"
        empty += 0 if text else 1
        if not writer.write(f"[Page {number}/{total}]\n{text}\n\n"):
            break
    if total and len(unreadable) == total:
        raise ExtractionFailed("no page of the PDF could be read")
    notes: Notes = {"pages": total}
    if unreadable:
        notes["unreadable_pages"] = unreadable[:50]
    if empty:
        notes["pages_without_text"] = empty
    return notes


def parse_docx(path: Path, detected: DetectedType, writer: ExtractWriter, limits: ExtractionLimits) -> Notes:
    """Paragraphs and tables in document order; table rows as tab-separated cells."""
    check_package(path, limits)
    with _reading("DOCX", path):
        document = docx.Document(str(path))
        blocks = list(document.iter_inner_content())
    tables = 0
    for block in blocks:
        if isinstance(block, Table):
            tables += 1
            text = "\n".join("\t".join(cell.text for cell in row.cells) for row in block.rows)
        else:
            text = block.text
        if not writer.write(text + "\n"):
            break
    return {"paragraphs": len(blocks) - tables, "tables": tables}


def parse_xlsx(path: Path, detected: DetectedType, writer: ExtractWriter, limits: ExtractionLimits) -> Notes:
    """Sheet by sheet: a `[Sheet: name]` line, then each row that has a value as tab-separated
    cell values."""
    check_package(path, limits)
    # A file object, not the path: openpyxl refuses paths without an Excel extension.
    with path.open("rb") as handle:
        with _reading("XLSX", path):
            workbook = openpyxl.load_workbook(handle, read_only=True, data_only=True)
        try:
            with _reading("XLSX", path):
                return _write_sheets(workbook, writer)
        finally:
            workbook.close()


def _write_sheets(workbook: openpyxl.Workbook, writer: ExtractWriter) -> Notes:
    rows = 0
    sheets: list[str] = []
    for sheet in workbook.worksheets:
        sheets.append(sheet.title)
        if not writer.write(f"[Sheet: {sheet.title}]\n"):
            break
        # Rows come from the cells the sheet holds, never from the dimension it declares: a
        # tiny file may declare A1:XFD1048576, which openpyxl would fill with empty cells.
        sheet.reset_dimensions()
        for values in sheet.iter_rows(values_only=True):
            cells = ["" if value is None else str(value) for value in values]
            while cells and not cells[-1]:
                cells.pop()
            if not cells:
                continue
            rows += 1
            if not writer.write("\t".join(cells) + "\n"):
                break
        if writer.full or not writer.write("\n"):
            break
    return {"sheets": sheets, "rows": rows}


def _describe(exc: Exception, path: Path) -> str:
    """The exception in one short line, without the server-side path of the file."""
    text = str(exc).replace(str(path), "the file").strip()
    message = text.splitlines()[0][:200] if text else ""
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _encoding_name(encoding: str) -> str:
    return codecs.lookup(encoding).name


Parser = Callable[[Path, DetectedType, ExtractWriter, ExtractionLimits], Notes]


def check_image(path: Path) -> Notes:
    """An image's format and size, after Pillow checked its structure (chunk checksums and
    the like, without decoding every pixel): a corrupt image is never shown to a model."""
    try:
        with PIL.Image.open(path) as image:
            notes: Notes = {"width": image.width, "height": image.height}
            image.verify()
    except (OSError, SyntaxError, ValueError, PIL.Image.DecompressionBombError) as exc:
        raise ExtractionFailed(f"the image could not be decoded ({exc})") from None
    return notes


PARSERS: dict[str, Parser] = {
    "text": parse_text,
    "code": parse_text,
    "markdown": parse_text,
    "log": parse_text,
    "table": parse_text,
    "json": parse_text,
    "html": parse_html,
    "pdf": parse_pdf,
    "docx": parse_docx,
    "xlsx": parse_xlsx,
}
