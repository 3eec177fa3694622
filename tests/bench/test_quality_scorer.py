"""The quality set's scorer (`bench.bench_local_model --quality`): it finds the one checkable
answer in a right reply, and refuses a wrong one, for each kind of check."""

from __future__ import annotations

from collections import Counter

import pytest

from bench import bench_local_model
from bench.bench_local_model import numbers_in, quality_questions, run_code, score_answer

ARITHMETIC = {"check": "number", "answer": 420}
CODE = {"check": "code", "answer": "[2, 4, 6]"}
SUMMARY = {"check": "numbers_kept", "answer": [1250, 38, 4]}


def test_the_set_is_thirty_questions_or_more_half_english_half_chinese() -> None:
    questions = quality_questions()
    assert len(questions) >= 30
    assert Counter(q["lang"] for q in questions) == {"en": len(questions) // 2, "zh": len(questions) // 2}
    assert {q["category"] for q in questions} == {"arithmetic", "units", "dates", "facts", "code", "summary"}


@pytest.mark.parametrize(
    "reply",
    [
        "420",
        "1200 − 430 − 4 × 85 = 1200 − 430 − 340 = 420. You have **420 euros** left.",
        "还剩 420 元。",
        "Left: 420.00",
    ],
)
def test_a_right_reckoning_scores_on_its_last_number(reply: str) -> None:
    assert score_answer(ARITHMETIC, reply)


@pytest.mark.parametrize(
    "reply",
    ["142", "You have 420 euros... no wait, 142 euros left.", "About four hundred", "", "4200"],
)
def test_a_wrong_or_missing_number_scores_nothing(reply: str) -> None:
    assert not score_answer(ARITHMETIC, reply)


def test_numbers_keep_their_thousands_and_decimals() -> None:
    assert numbers_in("1,250 books, 2.5 kg and -3 degrees; a list [2, 4, 6]") == [1250, 2.5, -3, 2, 4, 6]


def test_the_code_a_reply_writes_is_run_and_its_output_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_local_model, "CODE_TIMEOUT_S", 1.0)
    right = "Here it is:\n```python\nprint([n for n in [1, 2, 3, 4, 5, 6] if n % 2 == 0])\n```\n"
    assert score_answer(CODE, right)
    assert not score_answer(CODE, "```python\nprint([1, 3, 5])\n```")
    assert not score_answer(CODE, "```python\nraise SystemExit(print([2, 4, 6]) or 1)\n```")
    assert run_code("```python\nwhile True: pass\n```") == ""  # cut off by the timeout


def test_a_summary_must_keep_every_number() -> None:
    assert score_answer(SUMMARY, "The library lent 1,250 books, bought 38 e-readers and opens 4 evenings.")
    assert not score_answer(SUMMARY, "The library lent many books and bought 38 e-readers, open 4 evenings.")


def test_a_fact_is_found_in_any_case() -> None:
    assert score_answer({"check": "contains", "answer": ["Paris"]}, "paris.")
    assert not score_answer({"check": "contains", "answer": ["北京"]}, "上海")


def test_a_year_is_found_before_the_rest_of_a_date() -> None:
    year = {"check": "year", "answer": 2008}
    assert score_answer(year, "小明 2026 年 18 岁，他出生于 2008 年 12 月 31 日。")
    assert not score_answer(year, "他出生于 2026 - 18 = 2007 年。")
