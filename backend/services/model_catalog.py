"""The models users may choose (docs/features.md "Models"): one catalog per process, built at start.

Read from the file `CHAT_SHELL_MODELS` names (TOML or JSON, by its suffix); without it, the
single-provider settings (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `CHAT_SHELL_MODEL`) are a
one-entry catalog. The embedded local model joins as one more entry once its server runs. Each
entry names the environment variable that holds its key, never the key itself; a variable
missing from the environment stops the start with its name. What `GET /api/models` shows of
an entry is `ModelInfo`: never a key or a URL.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from backend.services.errors import Invalid
from backend.settings import Settings
from chat_shell.providers.openai import ProviderConfig
from chat_shell.providers.profiles import check_overrides
from chat_shell.runtime import UNKNOWN_MODEL, ModelChoice

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
# What an endpoint without keys (a local server) is sent as the key.
NO_KEY = "not-needed"


class ModelConfigurationError(RuntimeError):
    """The settings do not describe a usable set of models."""


class ModelEntry(BaseModel):
    """One `[[models]]` entry of the models file."""

    model_config = ConfigDict(extra="forbid")

    # What users choose and conversations store; also the profile overrides' key.
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$", max_length=100)
    label: str | None = Field(default=None, max_length=100)
    base_url: str = Field(pattern=r"^https?://")
    # The environment variable holding the provider's key; none for endpoints without keys.
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # The name the provider knows the model by (default: the id).
    model: str | None = None
    accepts_images: bool = False
    # The id of the entry whose model writes this one's compaction summaries (default: itself).
    summarizer: str | None = None
    # Profile fields for this model (window, output budget, tokenizer, compaction settings).
    profile: dict[str, Any] = Field(default_factory=dict)

    @field_validator("profile")
    @classmethod
    def _known_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_overrides({"profile": value})
        return value


class ModelsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The id of new conversations' model (default: the first entry).
    default: str | None = None
    models: list[ModelEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> ModelsFile:
        ids = [entry.id for entry in self.models]
        doubled = sorted({model for model in ids if ids.count(model) > 1})
        if doubled:
            raise ValueError(f"model ids must be unique; repeated: {doubled}")
        if self.default is not None and self.default not in ids:
            raise ValueError(f"default {self.default!r} is not one of the models {ids}")
        for entry in self.models:
            if entry.summarizer is not None and entry.summarizer not in ids:
                raise ValueError(f"model {entry.id!r}: summarizer {entry.summarizer!r} is not one of {ids}")
        return self


class ModelInfo(BaseModel):
    """What a user may know of a model: no key, no URL."""

    id: str
    label: str
    accepts_images: bool
    context_window: int
    max_output_tokens: int
    # The meter's scale for a turn with this model (SPEC 5.7): input room and compaction threshold.
    available_input: int
    trigger: int
    # From here the meter shows "nearing the compaction threshold".
    warning_from: int


class ModelList(BaseModel):
    """`GET /api/models`: the models a user may choose, and new conversations' model."""

    default: str
    models: list[ModelInfo]


@dataclass(frozen=True)
class CatalogModel:
    id: str
    label: str
    base_url: str
    api_key: str
    name: str
    accepts_images: bool = False
    summarizer: str | None = None
    profile: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelCatalog:
    default: str
    models: Mapping[str, CatalogModel]

    def resolve(self, model: str | None) -> str:
        """The id a conversation's model runs as (None: the default); an id not configured
        (any more) is refused with `unknown_model`."""
        if model is None:
            return self.default
        if model not in self.models:
            raise Invalid(
                UNKNOWN_MODEL,
                f"The model {model!r} is not configured here; choose one of: {', '.join(self.models)}.",
            )
        return model

    def choices(self, timeout_seconds: float) -> dict[str, ModelChoice]:
        return {
            entry.id: ModelChoice(
                id=entry.id,
                provider=ProviderConfig(
                    base_url=entry.base_url, api_key=entry.api_key, timeout_seconds=timeout_seconds
                ),
                name=entry.name,
                summarizer=entry.summarizer,
            )
            for entry in self.models.values()
        }

    def profile_overrides(self, settings: Settings) -> dict[str, dict[str, Any]]:
        """The settings' profile fields with each entry's own on top (for its id)."""
        overrides = settings.profile_overrides
        for entry in self.models.values():
            own = {**({"accepts_images": True} if entry.accepts_images else {}), **entry.profile}
            if own:
                overrides[entry.id] = {**overrides.get(entry.id, {}), **own}
        return overrides

    def with_model(self, entry: CatalogModel, *, default: bool) -> ModelCatalog:
        models = {**self.models, entry.id: entry}
        return ModelCatalog(entry.id if default or not self.models else self.default, models)


def read_models_file(path: Path) -> ModelsFile:
    """The parsed, checked models file; any problem names the file and what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelConfigurationError(f"CHAT_SHELL_MODELS: cannot read {path}: {exc.strerror}") from None
    try:
        document = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
        return ModelsFile.model_validate(document)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ModelConfigurationError(
            f"CHAT_SHELL_MODELS: {path} is not valid {path.suffix[1:]}: {exc}"
        ) from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'file'}: {error['msg']}"
            for error in exc.errors()
        )
        raise ModelConfigurationError(f"CHAT_SHELL_MODELS: {path}: {problems}") from None


def _key(entry: ModelEntry, environ: Mapping[str, str]) -> str:
    if entry.api_key_env is None:
        return NO_KEY
    key = environ.get(entry.api_key_env)
    if not key:
        raise ModelConfigurationError(
            f"The model {entry.id!r} takes its provider key from the environment variable "
            f"{entry.api_key_env}, which is not set: set {entry.api_key_env}, or remove the model "
            "from CHAT_SHELL_MODELS."
        )
    return key


def configured_catalog(settings: Settings, environ: Mapping[str, str] | None = None) -> ModelCatalog:
    """The models the settings configure (the local model not included): the models file's, or
    the single provider's as one entry, or none."""
    environ = os.environ if environ is None else environ
    if settings.models is not None:
        document = read_models_file(settings.models)
        entries = {
            entry.id: CatalogModel(
                id=entry.id,
                label=entry.label or entry.id,
                base_url=entry.base_url,
                api_key=_key(entry, environ),
                name=entry.model or entry.id,
                accepts_images=entry.accepts_images,
                summarizer=entry.summarizer,
                profile=entry.profile,
            )
            for entry in document.models
        }
        return ModelCatalog(document.default or document.models[0].id, entries)
    if not settings.uses_remote_provider:
        return ModelCatalog("", {})
    model = settings.model or DEFAULT_MODEL
    single = CatalogModel(
        id=model,
        label=model,
        base_url=settings.openai_base_url or OPENAI_DEFAULT_BASE_URL,
        api_key=settings.openai_api_key or NO_KEY,
        name=model,
    )
    return ModelCatalog(model, {model: single})
