"""Deterministic texts that stress token counting and truncation."""

from __future__ import annotations

import json
import random

import regex

# Scripts and sequences a careless cut would break: CJK, emoji ZWJ sequences and flags,
# skin-tone modifiers, Hebrew and Arabic (RTL) with combining marks, a decomposed accent.
MIXED_PIECES = (
    "上下文窗口管理需要精确计数。",
    "👨‍👩‍👧‍👦",
    "🇨🇳🇮🇱",
    "👍🏽",
    "שָׁלוֹם עוֹלָם",
    "مَرْحَبًا بِالْعَالَم",
    "e\u0301té",
    "日本語のテキスト、한국어 텍스트.",
    " plain English words between the scripts ",
    "\u202eRTL override\u202c",
)


def mixed_script_text(chars: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < chars:
        piece = rng.choice(MIXED_PIECES)
        out.append(piece)
        size += len(piece)
    return "".join(out)


def log_text(chars: int, seed: int = 11) -> str:
    rng = random.Random(seed)
    lines: list[str] = []
    size = 0
    n = 0
    while size < chars:
        line = (
            f"2026-11-{rng.randint(1, 28):02d}T12:00:{n % 60:02d}Z INFO [worker-{rng.randint(1, 8)}] "
            f"line={n} req={rng.getrandbits(32):08x} GET /v1/orders 200 {rng.randint(1, 900)}ms"
        )
        lines.append(line)
        size += len(line) + 1
        n += 1
    return "\n".join(lines)[:chars]


def json_single_line(chars: int, seed: int = 13) -> str:
    """A minified JSON document on one line of about `chars` characters."""
    rng = random.Random(seed)
    records = []
    size = 0
    while size < chars:
        record = {"id": f"SO-{rng.randint(10000, 99999)}", "price": rng.randint(1, 9000), "tags": ["a", "b"]}
        records.append(record)
        size += len(json.dumps(record, separators=(",", ":"))) + 1
    return json.dumps({"results": records}, separators=(",", ":"))


def binaryish_text(chars: int, seed: int = 17) -> str:
    """Bytes decoded as Latin-1 with NULs and control characters, as a tool dumping a binary."""
    rng = random.Random(seed)
    return bytes(rng.getrandbits(8) for _ in range(chars)).decode("latin-1")


def grapheme_boundaries(text: str) -> set[int]:
    bounds = {0}
    position = 0
    for cluster in regex.findall(r"\X", text):
        position += len(cluster)
        bounds.add(position)
    return bounds


# Plain English filler for turns long enough to cross a compaction trigger.
WORDS = "budget camera lens delivery invoice warehouse schedule meeting deadline report "
# A runtime model profile small enough that a few turns of test text cross its trigger.
SMALL_PROFILE = {
    "context_window": 16_000,
    "max_output_tokens": 1_000,
    "trigger_tokens": 4_000,
    "keep_tokens": 2_000,
    "trim_tokens_to_summarize": 1_500,
    "summary_max_tokens": 200,
    "overhead_tokens": 300,
}
# Compaction settings small enough that a few turns of test text cross the trigger.
SMALL_COMPACTION = {
    "compaction_trigger_tokens": 3_000,
    "compaction_keep_tokens": 1_500,
    "compaction_overhead_tokens": 100,
    "compaction_chunk_tokens": 1_200,
    "summary_max_tokens": 200,
}
