"""How text names an attachment by its id: the form summaries are asked to write, and the
preview header form a summary may copy. Below the guard and the tools, since both read it: the
summary prompt asks for it, the tool set offers `read_attachment` when a summary uses it."""

from __future__ import annotations

import re

# How a summary names an attachment (the summary prompt asks for this form, and preview headers
# carry "ID: <n> |", which a summary may copy verbatim).
ATTACHMENT_REFERENCE = "attachment ID {id}"
_NAMED = re.compile(r"\battachment\s+ID[:\s]*(\d+)|\bID:\s*(\d+)\s*\|", re.IGNORECASE)


def named_attachment_ids(text: str) -> set[int]:
    """The attachment ids `text` names in the reference or header form."""
    return {int(a or b) for a, b in _NAMED.findall(text)}
