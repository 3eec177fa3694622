"""Where a model's text starts to loop. Small models decoding greedily (the local model writing
a summary) can repeat a block of lines they already wrote until the output limit: measured on
the Chinese summary of `bench.bench_summary_facts`, Qwen2.5-Coder-1.5B wrote its sections again
and again to its 512-token limit, about two minutes of decoding on two cores for nothing."""

from __future__ import annotations

import re

# This many lines in a row, each one already written, is a loop (not a point restated).
REPEATED_LINES = 3
# Shorter lines ("- none", a bare rule) repeat in honest text and neither make nor break a loop.
MIN_LINE_CHARS = 6
# A line's list markers, heading marks and numbering: "#### 6. Budget" repeats "#### 2. Budget".
_MARKERS = re.compile(r"^[\s#>*+\-\d.、)）:：]*")


def _key(line: str) -> str:
    return _MARKERS.sub("", line).strip()


def loop_start(text: str) -> int | None:
    """The offset in `text` where it began repeating itself, or None. Only complete lines count
    (the text may still be arriving); the loop starts at the first line of the repeated run."""
    seen: set[str] = set()
    run_start, run, offset = 0, 0, 0
    for line in text.split("\n")[:-1]:
        key = _key(line)
        if len(key) >= MIN_LINE_CHARS:
            if key not in seen:
                seen.add(key)
                run = 0
            else:
                run_start = offset if run == 0 else run_start
                run += 1
                if run == REPEATED_LINES:
                    return run_start
        offset += len(line) + 1
    return None
