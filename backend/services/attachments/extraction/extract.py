"""Parsing one file into its stored text: what an extraction worker runs (worker.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.services.attachments.extraction import Extraction, failed
from backend.services.attachments.extraction.detection import DetectedType
from backend.services.attachments.extraction.errors import ExtractionFailed
from backend.services.attachments.extraction.limits import ExtractionLimits
from backend.services.attachments.extraction.parsers import PARSERS, check_image
from backend.services.attachments.extraction.store import ExtractWriter

_NOT_EXTRACTED = {
    "empty": "empty file (0 bytes)",
    "image": "image: stored, no text extracted",
    "binary": "binary file: stored, no text extracted",
}


def extract(
    original: Path, detected: DetectedType, workdir: Path, max_chars: int, limits: ExtractionLimits
) -> Extraction:
    """Extract the text of `original` (of the `detected` type) into `workdir` (large) or memory
    (small).

    Never raises for bad input: an unreadable document, or one past a limit, comes back
    `failed` with a reason.
    """
    notes: dict[str, Any] = {"kind": detected.kind, "max_chars": max_chars}
    parser = PARSERS.get(detected.kind)
    if parser is None:
        if detected.kind == "image":
            try:
                notes.update(check_image(original))
            except ExtractionFailed as exc:
                return failed(detected, max_chars, exc)
        notes["note"] = _NOT_EXTRACTED[detected.kind]
        return Extraction(detected, "ready", None, notes)
    writer = ExtractWriter(workdir, max_chars)
    try:
        notes.update(parser(original, detected, writer, limits))
    except ExtractionFailed as exc:
        writer.discard()
        return failed(detected, max_chars, exc)
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
