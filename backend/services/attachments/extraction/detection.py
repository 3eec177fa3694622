"""What a file is, decided by its bytes: magic numbers first (`filetype`), then text sniffing.

The name is only a hint among text types (a `.py` file is code, a `.md` file Markdown) once the
content is known to be text; it never makes a binary file text or a text file binary.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import mimetypes
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import charset_normalizer
import filetype

from chat_shell.contracts import AttachmentKind

# How many leading bytes detection looks at.
SNIFF_BYTES = 64 * 1024

Kind = AttachmentKind

DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX_MIME = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# fmt: off
_CODE_EXTENSIONS = frozenset({
    "py", "pyi", "js", "mjs", "cjs", "ts", "tsx", "jsx", "go", "rs", "java", "kt", "kts", "scala",
    "c", "h", "cc", "cpp", "hpp", "cs", "rb", "php", "swift", "m", "sh", "bash", "zsh", "ps1",
    "sql", "r", "lua", "pl", "dart", "ex", "exs", "erl", "hs", "clj", "vue", "svelte", "css",
    "scss", "less", "yaml", "yml", "toml", "ini", "cfg", "conf", "xml", "proto", "graphql", "tf",
    "gradle",
})
# fmt: on
_MARKDOWN_EXTENSIONS = frozenset({".md", ".markdown", ".mdx", ".rst"})
_LOG_LINE = re.compile(r"^\s*[\[(]?(\d{4}-\d{2}-\d{2}|\d{2}:\d{2}:\d{2}|[A-Z][a-z]{2} +\d{1,2} \d{2}:)")
_HTML_START = re.compile(
    rb"^\s*(<!--.*?-->\s*)*<(!doctype\s+html|html[\s>]|head[\s>]|body[\s>])", re.I | re.S
)


@dataclass(frozen=True)
class DetectedType:
    mime: str
    kind: Kind
    encoding: str | None = None  # for text kinds


def detect(path: Path, filename: str) -> DetectedType:
    """Classify the stored file at `path`; `filename` is the user's (sanitized) name."""
    size = path.stat().st_size
    if size == 0:
        return DetectedType("application/x-empty", "empty")
    with path.open("rb") as handle:
        head = handle.read(SNIFF_BYTES)
    guessed = filetype.guess(head[:8192])
    if guessed is not None:
        return _binary_type(guessed.mime, path)
    complete = size <= len(head)
    encoding = text_encoding(head, complete=complete)
    if encoding is None:
        return DetectedType("application/octet-stream", "binary")
    return _text_type(head.decode(encoding, "replace"), head, filename, encoding, complete)


def _binary_type(mime: str, path: Path) -> DetectedType:
    if mime == "application/pdf":
        return DetectedType(mime, "pdf")
    if mime == DOCX_MIME:
        return DetectedType(mime, "docx")
    if mime == XLSX_MIME:
        return DetectedType(mime, "xlsx")
    if mime == "application/zip":
        # filetype only sees the first members; an Office file may list its parts later.
        members = _zip_members(path)
        if "word/document.xml" in members:
            return DetectedType(DOCX_MIME, "docx")
        if "xl/workbook.xml" in members:
            return DetectedType(XLSX_MIME, "xlsx")
    if mime.startswith("image/"):
        return DetectedType(mime, "image")
    return DetectedType(mime, "binary")


def _zip_members(path: Path) -> set[str]:
    try:
        with zipfile.ZipFile(path) as archive:
            return set(archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return set()


def text_encoding(sample: bytes, complete: bool) -> str | None:
    """The encoding of `sample` if it is text, else None (binary)."""
    for bom, name in _BOMS:
        if sample.startswith(bom):
            return name
    if b"\x00" in sample:
        return None
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=complete)
        return "utf-8"
    except UnicodeDecodeError:
        pass
    matches = charset_normalizer.from_bytes(sample)
    best = matches.best()
    if best is None:
        return None
    # Equally plausible code pages (cp1250 and cp1252 read most Western text alike): prefer
    # Windows-1252, by far the most common legacy encoding.
    tied = [m for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
    best = next((m for m in tied if m.encoding == "cp1252"), best)
    # Mostly control characters means binary, whatever an 8-bit code page would say.
    decoded = str(best)
    controls = sum(1 for ch in decoded if ord(ch) < 32 and ch not in "\t\n\r\f\v\x1b")
    if decoded and controls / len(decoded) > 0.05:
        return None
    return best.encoding


def _text_type(sample: str, head: bytes, filename: str, encoding: str, complete: bool) -> DetectedType:
    suffix = PurePosixPath(filename.lower()).suffix
    stripped = sample.lstrip("\ufeff \t\r\n")
    if _HTML_START.match(head.lstrip(codecs.BOM_UTF8)) or (
        suffix in {".html", ".htm"} and stripped[:1] == "<"
    ):
        return DetectedType("text/html", "html", encoding)
    if stripped[:1] in ("{", "[") and (
        suffix in {".json", ".jsonl", ".ndjson", ".geojson"} or _parses_as_json(stripped, complete)
    ):
        return DetectedType("application/json", "json", encoding)
    if stripped.startswith("<?xml"):
        return DetectedType("application/xml", "code", encoding)
    delimiter = _table_delimiter(sample, suffix)
    if delimiter is not None:
        return DetectedType(
            "text/tab-separated-values" if delimiter == "\t" else "text/csv", "table", encoding
        )
    if suffix in _MARKDOWN_EXTENSIONS:
        return DetectedType("text/markdown", "markdown", encoding)
    if suffix[1:] in _CODE_EXTENSIONS or Path(filename).name.lower() in {"dockerfile", "makefile"}:
        guessed, _ = mimetypes.guess_type(f"x{suffix}")
        return DetectedType(
            guessed if guessed and guessed.startswith("text/") else "text/plain", "code", encoding
        )
    if suffix == ".log" or _looks_like_log(sample):
        return DetectedType("text/plain", "log", encoding)
    return DetectedType("text/plain", "text", encoding)


def _parses_as_json(text: str, complete: bool) -> bool:
    if not complete:
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _table_delimiter(sample: str, suffix: str) -> str | None:
    lines = [line for line in sample.splitlines()[:50] if line.strip()]
    if suffix in {".csv", ".tsv"}:
        return "\t" if suffix == ".tsv" else ","
    if len(lines) < 3:
        return None
    # Content-only: every sampled row splits into the same number (>= 2) of fields.
    body = "\n".join(lines[:-1] if len(lines) > 3 else lines)
    for delimiter in ("\t", ",", ";"):
        rows = list(csv.reader(io.StringIO(body), delimiter=delimiter))
        widths = {len(row) for row in rows}
        if len(widths) == 1 and widths.pop() >= 2:
            return delimiter
    return None


def _looks_like_log(sample: str) -> bool:
    lines = [line for line in sample.splitlines()[:40] if line.strip()]
    if len(lines) < 3:
        return False
    return sum(1 for line in lines if _LOG_LINE.match(line)) >= 0.6 * len(lines)
