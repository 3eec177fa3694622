"""The CJK writing systems by code point, and the language a text is written in as far as its
script tells: Chinese, Japanese, Korean, or none of them.

One source of truth for what counts as a CJK character: search's CJK index (migration 0022)
and the summary's language (summary compaction) both read it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Literal

# Kana: hiragana and katakana.
KANA_RANGES: tuple[tuple[int, int], ...] = ((0x3040, 0x30FF),)
# CJK ideographs: extension A, the unified block, the compatibility ones, extensions B to G.
HAN_RANGES: tuple[tuple[int, int], ...] = (
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x3134F),
)
HANGUL_RANGES: tuple[tuple[int, int], ...] = ((0xAC00, 0xD7AF),)
# Every character CJK text is written in, in code point order.
CJK_RANGES: tuple[tuple[int, int], ...] = tuple(sorted(KANA_RANGES + HAN_RANGES + HANGUL_RANGES))

CjkLanguage = Literal["zh", "ja", "ko"]


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(f"{chr(low)}-{chr(high)}" for low, high in ranges)


_HAN = re.compile(f"[{_char_class(HAN_RANGES)}]")
_KANA = re.compile(f"[{_char_class(KANA_RANGES)}]")
_HANGUL = re.compile(f"[{_char_class(HANGUL_RANGES)}]")
# A run of letters of any other script: a word.
_WORD = re.compile(rf"[^\W\d_{_char_class(CJK_RANGES)}]+")


def cjk_language(text: str) -> CjkLanguage | None:
    """The CJK language `text` is mostly written in, or None. Each CJK character weighs as much
    as a word of another script (a Chinese sentence holding an id, a path or an English name is
    still Chinese); kana make CJK text Japanese, Hangul Korean."""
    han, kana, hangul = len(_HAN.findall(text)), len(_KANA.findall(text)), len(_HANGUL.findall(text))
    if han + kana + hangul <= len(_WORD.findall(text)):
        return None
    if hangul > han + kana:
        return "ko"
    # Japanese mixes kanji with kana; Chinese has none.
    return "ja" if kana * 5 >= han else "zh"


def dominant_cjk_language(texts: Iterable[str]) -> CjkLanguage | None:
    """The language most of `texts` are written in (the latest of them breaks a tie), when it is
    a CJK one; None when most are in another script. One long pasted document weighs as one."""
    languages = [cjk_language(text) for text in texts if text.strip()]
    if not languages:
        return None
    votes = Counter(languages)
    top = max(votes.values())
    return next(language for language in reversed(languages) if votes[language] == top)
