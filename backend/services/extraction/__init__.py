"""Text extraction for attachments: detect the type by content, parse, store the text.

`extract` is synchronous and CPU/disk bound; the upload path runs it in a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from backend.services.extraction.detection import DetectedType, detect
from backend.services.extraction.parsers import PARSERS, ExtractionFailed
from backend.services.extraction.store import ExtractWriter, StoredExtract

__all__ = ["DetectedType", "Extraction", "extract"]

_NOT_EXTRACTED = {
    "empty": "empty file (0 bytes)",
    "image": "image: stored, no text extracted",
    "binary": "binary file: stored, no text extracted",
}


@dataclass(frozen=True)
class Extraction:
    detected: DetectedType
    status: Literal["ready", "failed"]
    stored: StoredExtract | None
    notes: dict[str, Any] = field(default_factory=dict)


def extract(original: Path, filename: str, workdir: Path, max_chars: int) -> Extraction:
    """Detect `original`'s type and extract its text into `workdir` (large) or memory (small).

    Never raises for bad input: an unreadable document comes back `failed` with a reason.
    """
    detected = detect(original, filename)
    notes: dict[str, Any] = {"kind": detected.kind, "max_chars": max_chars}
    parser = PARSERS.get(detected.kind)
    if parser is None:
        notes["note"] = _NOT_EXTRACTED[detected.kind]
        return Extraction(detected, "ready", None, notes)
    writer = ExtractWriter(workdir, max_chars)
    try:
        notes.update(parser(original, detected, writer))
    except ExtractionFailed as exc:
        writer.discard()
        notes["error"] = exc.reason
        notes["note"] = f"text extraction failed: {exc.reason}"
        return Extraction(detected, "failed", None, notes)
    except BaseException:
        writer.discard()
        raise
    stored = writer.close()
    remarks = []
    if stored.truncated:
        notes["truncated_at_parse"] = True
        remarks.append(f"text truncated at parse time after {max_chars:,} characters")
    if notes.get("pages_without_text"):
        remarks.append(f"{notes['pages_without_text']} page(s) without a text layer")
    if notes.get("unreadable_pages"):
        remarks.append(f"{len(notes['unreadable_pages'])} page(s) could not be read")
    if notes.get("replaced_chars"):
        remarks.append(f"{notes['replaced_chars']:,} undecodable byte sequence(s) replaced")
    if stored.chars == 0:
        remarks.append("no text found")
    if remarks:
        notes["note"] = "; ".join(remarks)
    return Extraction(detected, "ready", stored, notes)
