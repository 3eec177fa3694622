"""All service settings in one place, read from the environment (and an optional `.env`).

The names of SPEC 8 are the public contract; everything else has a `CHAT_SHELL_` prefix.
`chat_shell` itself takes explicit config objects; the backend builds them from these settings.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from chat_shell.providers.profiles import check_overrides


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CHAT_SHELL_", env_file=".env", extra="ignore")

    # Storage
    data_dir: Path = Path("data")
    database_url: str | None = None
    # SQLite only: how long a write waits for the database's single write lock.
    sqlite_busy_timeout_seconds: float = Field(default=30.0, gt=0)
    redis_url: str | None = None

    # Model provider. With an API key or base URL set, that provider is used instead of the local model.
    openai_base_url: str | None = Field(default=None, validation_alias=AliasChoices("OPENAI_BASE_URL"))
    openai_api_key: str | None = Field(default=None, validation_alias=AliasChoices("OPENAI_API_KEY"))
    model: str | None = None
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    local_model: Literal["auto", "off"] = "auto"
    # The embedded local model: a GGUF file to serve instead of the packaged SmolLM2, the
    # loopback port to prefer (another free one is used when it is taken), and where the
    # once-built llama-cpp-python wheel is kept (default ~/.cache/chat-shell/wheels).
    local_model_file: Path | None = None
    local_model_port: int | None = Field(default=None, gt=0, lt=65536)
    wheel_cache: Path | None = None
    provider_timeout_seconds: float = Field(default=120.0, gt=0)
    summary_timeout_seconds: float = Field(default=120.0, gt=0)

    # Summary compaction (SPEC 4, 5.3), for every model unless `profiles` says otherwise.
    compaction_enabled: bool = True
    compaction_trigger_tokens: int | None = Field(default=None, gt=0)
    compaction_keep_tokens: int | None = Field(default=None, gt=0)
    compaction_chunk_tokens: int | None = Field(default=None, gt=0)
    compaction_overhead_tokens: int | None = Field(default=None, ge=0)
    summary_max_tokens: int | None = Field(default=None, gt=0)
    compaction_heartbeat_seconds: float = Field(default=5.0, gt=0)
    # Per-model profile fields as JSON, e.g. {"gpt-4o": {"trigger_tokens": 49152, "keep_tokens":
    # 24000}}; "*" applies to every model. Wins over the flat settings above.
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)

    # Where chat_shell runs: in this process, or as its own service reached over HTTP.
    runtime_mode: Literal["package", "service"] = "package"
    service_url: str = "http://127.0.0.1:8100"
    # Required in service mode: authenticates the backend to the service and keys the per-turn
    # capabilities the service reads history and attachments with.
    service_token: str | None = None
    # Where the chat_shell service reaches this backend (sent with every turn in service mode).
    backend_url: str = "http://127.0.0.1:8000"
    turn_capability_seconds: int = Field(default=3600, gt=0)

    # Accounts and HTTP. CHEAPEST hashing exists for test suites only.
    password_hash_profile: Literal["RFC_9106_LOW_MEMORY", "RFC_9106_HIGH_MEMORY", "CHEAPEST"] = (
        "RFC_9106_LOW_MEMORY"
    )
    session_days: int = Field(default=14, gt=0)
    cookie_secure: bool = False
    allow_registration: bool = True
    max_request_bytes: int = Field(default=1_000_000, gt=0)

    # Attachments
    max_upload_bytes: int = Field(default=50 * 1024 * 1024, gt=0)
    max_extracted_chars: int = Field(default=20_000_000, gt=0)

    # Turns and their delivery
    tool_call_limit: int = Field(default=30, gt=0)
    system_prompt: str | None = None
    event_log_retention_days: int = Field(default=7, ge=0)
    sse_ping_seconds: float = Field(default=15.0, gt=0)

    # Operators
    telemetry_enabled: bool = True
    metrics_token: str | None = None
    log_json: bool = False
    log_level: str = "INFO"

    @field_validator(
        "openai_base_url",
        "openai_api_key",
        "redis_url",
        "model",
        "service_token",
        "local_model_file",
        "local_model_port",
        "wheel_cache",
        mode="before",
    )
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'chat_shell.db').resolve()}"

    @field_validator("profiles")
    @classmethod
    def _known_profile_fields(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        check_overrides(value)
        return value

    @property
    def profile_overrides(self) -> dict[str, dict[str, Any]]:
        """The profile fields configuration sets, per model id ("*": every model)."""
        flat = {
            "trigger_tokens": self.compaction_trigger_tokens,
            "keep_tokens": self.compaction_keep_tokens,
            "trim_tokens_to_summarize": self.compaction_chunk_tokens,
            "overhead_tokens": self.compaction_overhead_tokens,
            "summary_max_tokens": self.summary_max_tokens,
        }
        every = {key: value for key, value in flat.items() if value is not None}
        if not self.compaction_enabled:
            every["compaction_enabled"] = False
        overrides = {model: dict(values) for model, values in self.profiles.items()}
        if every:
            overrides["*"] = {**every, **overrides.get("*", {})}
        return overrides

    @property
    def uses_remote_provider(self) -> bool:
        return bool(self.openai_api_key or self.openai_base_url)


@lru_cache
def get_settings() -> Settings:
    return Settings()
