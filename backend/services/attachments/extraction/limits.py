"""What one extraction may cost, and the checks a file passes before a parser opens it.

The sandbox (sandbox.py) enforces time and memory on the worker process; the checks here refuse
files whose structure alone says parsing would overrun: an OOXML package that unpacks too far
(a zip bomb), an HTML page too large to parse, a PDF with too many pages.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from backend.services.attachments.extraction.errors import ExtractionStopped

MB = 1024 * 1024
# Small parts may compress far better than 100:1 (a run of empty cells, boilerplate XML) and cost
# nothing to unpack; the ratio only matters above this size (Apache POI's grace size).
RATIO_GRACE_BYTES = 100 * 1024


@dataclass(frozen=True)
class ExtractionLimits:
    """One extraction's budget (settings `CHAT_SHELL_EXTRACTION_<FIELD>`)."""

    timeout_seconds: float  # wall clock of one task in a worker
    cpu_seconds: int  # processor time of one worker (RLIMIT_CPU)
    memory_mb: int  # address space of one worker (RLIMIT_AS)
    max_unpacked_mb: int  # all entries of an OOXML package, unpacked
    max_compression_ratio: float  # unpacked / packed size of any one OOXML entry
    max_html_mb: int  # HTML parsed at most
    max_pdf_pages: int  # pages of a PDF read at most


def check_package(path: Path, limits: ExtractionLimits) -> None:
    """Refuse an OOXML package (DOCX, XLSX) that would unpack past the limits, judged from its
    zip directory before anything is inflated.

    zipfile hands a parser no more of an entry than its directory declares (it cuts the entry
    there, and the CRC check then fails), so the declared sizes bound what parsing sees. An entry
    that lies may still inflate further in memory while zipfile reads it whole: the worker's
    memory limit bounds that.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError):
        return  # damaged: the parser says so in its own words
    if sum(entry.file_size for entry in entries) > limits.max_unpacked_mb * MB:
        raise ExtractionStopped(
            f"the file expands to more than {limits.max_unpacked_mb} MB when unpacked", "max_unpacked_mb"
        )
    for entry in entries:
        ratio = entry.file_size / max(entry.compress_size, 1)
        if entry.file_size > RATIO_GRACE_BYTES and ratio > limits.max_compression_ratio:
            raise ExtractionStopped(
                f"part of the file unpacks to more than {limits.max_compression_ratio:g} times its"
                " packed size, as a zip bomb does",
                "max_compression_ratio",
            )


def check_html_size(path: Path, limits: ExtractionLimits) -> None:
    """HTML parsing holds the whole document tree in memory: refuse pages past the cap."""
    if path.stat().st_size > limits.max_html_mb * MB:
        raise ExtractionStopped(
            f"the HTML page is larger than {limits.max_html_mb} MB, the most that is parsed", "max_html_mb"
        )


def check_pdf_pages(pages: int, limits: ExtractionLimits) -> None:
    if pages > limits.max_pdf_pages:
        raise ExtractionStopped(
            f"the PDF has {pages:,} pages, more than the {limits.max_pdf_pages:,} that are read",
            "max_pdf_pages",
        )
