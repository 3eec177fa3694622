"""A summary that starts repeating itself is cut where the repeat began, and its stream is left
then (a small local model decoding greedily otherwise writes the loop to its output limit)."""

from __future__ import annotations

import asyncio

from langchain_core.messages import HumanMessage

from chat_shell.providers.openai import ProviderConfig, create_chat_model
from chat_shell.providers.profiles import resolve_profile
from chat_shell.providers.repetition import loop_start
from chat_shell.providers.summarizer import ModelSummarizer
from tests.support.scripted_provider import ScriptedProvider, text

SECTIONS = (
    "#### 1. Budget and date\n- The budget is 4,150 euros, travel included.\n"
    "- The offsite is on 2026-03-14.\n- We are 41 people, interns included.\n\n"
    "#### 2. Venue\n- Booking reference KX-58311-Q.\n- No sesame in any dish.\n\n"
)
# What the local model wrote: the same sections again, renumbered, until its output limit.
LOOPING = SECTIONS + SECTIONS.replace("1.", "3.").replace("2.", "4.") * 8


def _summarizer(provider: ScriptedProvider) -> ModelSummarizer:
    config = ProviderConfig(base_url=provider.base_url, timeout_seconds=30, max_retries=0)
    return ModelSummarizer(create_chat_model(resolve_profile("gpt-4o", max_output_tokens=2048), config))


def test_a_loop_starts_at_the_first_line_written_again() -> None:
    assert loop_start(LOOPING) == len(SECTIONS)


def test_points_restated_or_short_lines_repeated_are_no_loop() -> None:
    honest = (
        "## Decisions\n- The budget is 4,150 euros.\n- none\n\n## Open questions\n- none\n"
        "## Constraints\n- The budget is 4,150 euros.\n- No sesame in any dish.\n- none\n"
    )
    assert loop_start(honest) is None
    # The last line may still be arriving: it does not count yet.
    assert (
        loop_start(SECTIONS + "#### 3. Budget and date\n- The budget is 4,150 euros, travel included.\n- The")
        is None
    )


async def test_the_summarizer_returns_the_text_before_the_loop_and_stops_reading(
    scripted_provider: ScriptedProvider,
) -> None:
    # `hang`: after the text the provider never ends the stream, so only stopping at the loop returns.
    scripted_provider.script(text(LOOPING, token_delay=0.001, hang=True))
    summary = await asyncio.wait_for(_summarizer(scripted_provider)([HumanMessage("summarize")]), 20)
    assert summary == SECTIONS.strip()
    scripted_provider.close()


async def test_a_summary_without_a_loop_is_returned_whole(scripted_provider: ScriptedProvider) -> None:
    scripted_provider.script(text(SECTIONS))
    assert await _summarizer(scripted_provider)([HumanMessage("summarize")]) == SECTIONS.strip()
