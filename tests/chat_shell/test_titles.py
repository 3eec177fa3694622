"""A generated title is one plain line: what models wrap titles in is taken off, long ones are
cut at a word, and an answer with nothing left is no title (the first line stays)."""

from __future__ import annotations

import pytest

from chat_shell.accounting.text_counter import TiktokenText
from chat_shell.contracts import TitleRequest
from chat_shell.titles import MAX_TITLE_CHARS, TITLE_INPUT_TOKENS, clean_title, title_messages


@pytest.mark.parametrize(
    ("answer", "title"),
    [
        ('Title: **"Trip to Lisbon"**.', "Trip to Lisbon"),
        ("# Plan a week in Rome!", "Plan a week in Rome!"),
        ("Budget for Q3.", "Budget for Q3"),
        ("\n\n1. Budget review\nSecond line", "Budget review"),
        ("Fixing `read_file` in C#", "Fixing read_file in C#"),
        ("[Docs](https://example.com) for uv", "Docs for uv"),
        ("标题：东京旅行计划。", "东京旅行计划"),
        ("「週末の予定」", "週末の予定"),
    ],
)
def test_decorations_are_taken_off(answer: str, title: str) -> None:
    assert clean_title(answer) == title


@pytest.mark.parametrize("answer", ["", "  \n ", "***", "```\n```", '"".'])
def test_an_answer_with_nothing_left_is_no_title(answer: str) -> None:
    assert clean_title(answer) is None


def test_a_long_title_is_cut_at_a_word_and_one_without_spaces_at_the_limit() -> None:
    words = clean_title("A very long title that goes on about many different things, far beyond sixty")
    assert words == "A very long title that goes on about many different things"
    assert len(words) <= MAX_TITLE_CHARS
    chinese = clean_title("这是一个非常长的中文标题" * 10)
    assert chinese is not None and len(chinese) == MAX_TITLE_CHARS


def test_the_writer_sees_a_bounded_start_of_each_side() -> None:
    counter = TiktokenText()
    request = TitleRequest(conversation_id=1, user_text="question " * 5000, reply_text="answer " * 5000)
    _, exchange = title_messages(request, counter)
    assert "question" in exchange.text and "answer" in exchange.text
    assert counter.count(exchange.text) <= 2 * TITLE_INPUT_TOKENS + 8
