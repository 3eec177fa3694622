"""The one reader of decimal numbers that arrive as text in a request (headers, form fields).

`str.isdigit()` is true for "²" and "١", which `int()` then rejects or reads; and `int()` of a
very long string raises. Every number taken from request text goes through `ascii_decimal`.
"""

from __future__ import annotations

import re

# Enough digits for any value a column or a byte count can hold, and then some.
MAX_DIGITS = 40
_ASCII_DIGITS = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}")


def ascii_decimal(text: str, *, minimum: int = 0, maximum: int | None = None) -> int | None:
    """The value of `text` when it is only ASCII digits and within `minimum`..`maximum`, else None."""
    if not _ASCII_DIGITS.fullmatch(text):
        return None
    value = int(text)
    if value < minimum or (maximum is not None and value > maximum):
        return None
    return value
