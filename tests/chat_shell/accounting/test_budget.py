"""Budget math per model profile (SPEC 4)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chat_shell.accounting.budget import budget_for, reserved_output
from chat_shell.providers.profiles import LOCAL_MODEL_NAME, ModelProfile, resolve_profile


def test_128k_window_gets_the_documented_defaults() -> None:
    budget = budget_for(resolve_profile("gpt-4o"))
    assert budget.context_window == 128_000
    assert budget.reserved_output == 16_000  # 10% is 12,800, clamped up to 16k
    assert budget.available_input == 112_000
    assert budget.trigger == 95_200  # 0.85 x available
    assert budget.keep == 50_400  # 0.45 x available
    assert budget.trim_tokens_to_summarize == 12_000
    assert budget.overhead_tokens == 4_000
    assert budget.summary_max_tokens == 1_500
    assert budget.tool_output_tokens == 15_000
    assert budget.attachment_preview_tokens == 15_000


def test_the_local_4096_token_model_gets_proportionate_budgets() -> None:
    budget = budget_for(resolve_profile(LOCAL_MODEL_NAME))
    assert budget.reserved_output == 512  # its max output, below the 16k floor
    assert budget.available_input == 3_584
    assert budget.trigger == 3_046
    assert budget.keep == 1_612
    assert budget.overhead_tokens == 537  # 0.15 x available, not 4,000
    assert budget.tool_output_tokens == 896  # 0.25 x available, not 15,000
    assert budget.summary_max_tokens == 358  # 0.1 x available, not 1,500
    assert budget.trim_tokens_to_summarize == 3_584 - 358
    assert budget.attachment_preview_tokens == 896


def test_the_seed_overrides_49152_and_24000_are_taken_as_given() -> None:
    profile = replace(resolve_profile("gpt-4o"), trigger_tokens=49_152, keep_tokens=24_000)
    budget = budget_for(profile)
    assert (budget.trigger, budget.keep) == (49_152, 24_000)
    assert budget.available_input == 112_000


def test_overrides_cannot_exceed_the_available_input_or_put_keep_above_trigger() -> None:
    profile = replace(resolve_profile("gpt-4"), trigger_tokens=1_000_000, keep_tokens=2_000_000)
    budget = budget_for(profile)
    assert budget.trigger == budget.available_input == 4_096
    assert budget.keep == budget.trigger


def test_reserved_output_is_capped_by_max_output_and_half_the_window() -> None:
    assert reserved_output(1_047_576, 32_768) == 32_768  # 10% would be 104k, clamp 48k, max 32k
    assert reserved_output(2_000_000, 100_000) == 48_000
    assert reserved_output(8_192, 4_096) == 4_096
    assert reserved_output(4_096, 100_000) == 2_048  # never more than half the window


def test_per_tool_overrides_replace_the_default_budget() -> None:
    profile = replace(resolve_profile("gpt-4o"), tool_output_overrides={"run_shell": 2_000})
    budget = budget_for(profile)
    assert budget.tool_output_limit("run_shell") == 2_000
    assert budget.tool_output_limit("search_web") == 15_000
    assert budget.tool_output_limit(None) == 15_000


@pytest.mark.parametrize("window", [1_024, 2_048, 4_096, 8_192, 16_385, 32_768, 128_000, 200_000, 2_097_152])
def test_every_default_respects_its_share_of_the_available_input(window: int) -> None:
    budget = budget_for(ModelProfile("m", window, 8_192))
    available = budget.available_input
    assert budget.reserved_output <= window // 2
    assert budget.keep <= budget.trigger <= available
    assert budget.overhead_tokens <= 0.15 * available
    assert budget.tool_output_tokens <= 0.25 * available
    assert budget.summary_max_tokens <= 0.1 * available
    assert budget.trim_tokens_to_summarize <= available - budget.summary_max_tokens
    assert budget.attachment_preview_tokens <= min(window // 2, 15_000)
