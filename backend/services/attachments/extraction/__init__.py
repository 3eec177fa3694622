"""Text extraction for attachments: detect the type by content, parse, store the text.

`detect` and `extract` (extract.py) are synchronous, CPU/disk bound and fed untrusted files: the
upload path runs them in the sandbox's worker processes (sandbox.py), under the limits of
limits.py. This package's top level holds only the outcome types, so a process that never parses
(the web tier) never imports the parsers and their document libraries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from backend.services.attachments.extraction.detection import DetectedType, detect
from backend.services.attachments.extraction.errors import ExtractionFailed, ExtractionStopped
from backend.services.attachments.extraction.limits import ExtractionLimits
from backend.services.attachments.extraction.store import StoredExtract

__all__ = [
    "DetectedType",
    "Extraction",
    "ExtractionFailed",
    "ExtractionLimits",
    "ExtractionStopped",
    "detect",
    "failed",
]


@dataclass(frozen=True)
class Extraction:
    detected: DetectedType
    status: Literal["ready", "failed"]
    stored: StoredExtract | None
    notes: dict[str, Any] = field(default_factory=dict)


def failed(detected: DetectedType, max_chars: int, failure: ExtractionFailed) -> Extraction:
    """The outcome of a file whose text could not be extracted, with the reason in its notes."""
    notes: dict[str, Any] = {
        "kind": detected.kind,
        "max_chars": max_chars,
        "error": failure.reason,
        "note": f"text extraction failed: {failure.reason}",
    }
    if isinstance(failure, ExtractionStopped):
        notes["stopped_by"] = failure.stopped_by
    return Extraction(detected, "failed", None, notes)
