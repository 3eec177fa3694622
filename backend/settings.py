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

from backend.local_model.catalog import catalog_model
from chat_shell.guard.stages.summary_compaction.settings import CompactionSettings
from chat_shell.providers.profiles import check_overrides
from chat_shell.tools.mcp_config import StdioServer, StreamableHttpServer, load_servers


class RuntimeConfigurationError(RuntimeError):
    """The settings do not describe a usable model provider."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CHAT_SHELL_", env_file=".env", extra="ignore")

    # Storage
    data_dir: Path = Path("data")
    database_url: str | None = None
    # SQLite only: how long a write waits for the database's single write lock.
    sqlite_busy_timeout_seconds: float = Field(default=30.0, gt=0)
    redis_url: str | None = None

    # The models users may choose, several providers each (docs/features.md "Models"): a TOML or JSON file.
    # Without it the single provider below is the one model.
    models: Path | None = None
    # Model provider. With an API key or base URL set, that provider is used instead of the local model.
    openai_base_url: str | None = Field(default=None, validation_alias=AliasChoices("OPENAI_BASE_URL"))
    openai_api_key: str | None = Field(default=None, validation_alias=AliasChoices("OPENAI_API_KEY"))
    model: str | None = None
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    # The embedded local model (docs/local-model.md): `auto` (the default
    # catalog model), `off`, or a catalog model's name; a GGUF file to serve instead; the
    # loopback port to prefer (another free one is used when it is taken); where catalog models
    # are kept (default ~/.cache/chat-shell/models); a llama-server-compatible program to serve
    # with instead of the bundled xllamacpp; how long a start may take before it counts as failed.
    local_model: str = "auto"
    local_model_file: Path | None = None
    local_model_port: int | None = Field(default=None, gt=0, lt=65536)
    local_model_cache: Path | None = None
    local_model_server: str | None = None
    local_model_startup_timeout_seconds: float = Field(default=120.0, gt=0)
    provider_timeout_seconds: float = Field(default=120.0, gt=0)
    summary_timeout_seconds: float = Field(default=120.0, gt=0)
    summary_temperature: float = Field(default=CompactionSettings.summary_temperature, ge=0, le=2)

    # Summary compaction (SPEC 4, 5.3), for every model unless `profiles` says otherwise.
    compaction_enabled: bool = True
    compaction_trigger_tokens: int | None = Field(default=None, gt=0)
    compaction_keep_tokens: int | None = Field(default=None, gt=0)
    # Compaction ahead of time (issue 20): after a turn, a conversation whose next request is
    # estimated at or above the pre-trigger (default 0.7 x trigger) is compacted in the background.
    compaction_ahead: bool = True
    # Generated titles (issue 22): after the first reply of a conversation the page created with
    # `generate_title`, the summarizer's model writes a short title in place of the first line.
    generated_titles: bool = True
    compaction_pre_trigger_tokens: int | None = Field(default=None, gt=0)
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
    # Required in service mode (docs/deployment.md "Secrets"): authenticates the backend to the service.
    service_token: str | None = None
    # Signs the per-turn capabilities the service reads history and attachments with; required
    # in service mode (the same on every backend replica, never the service token), generated
    # per process otherwise.
    capability_key: str | None = None
    # Where the chat_shell service reaches this backend (sent with every turn in service mode).
    backend_url: str = "http://127.0.0.1:8000"

    # Accounts and HTTP. CHEAPEST hashing exists for test suites only.
    password_hash_profile: Literal["RFC_9106_LOW_MEMORY", "RFC_9106_HIGH_MEMORY", "CHEAPEST"] = (
        "RFC_9106_LOW_MEMORY"
    )
    session_days: int = Field(default=14, gt=0)
    # API tokens made without `expires_in_days` expire after this many days.
    token_days: int = Field(default=90, gt=0, le=3650)
    max_request_bytes: int = Field(default=1_000_000, gt=0)

    # HTTPS and proxies (SECURITY.md). A request over HTTPS (TLS to this process, or a trusted
    # proxy's `X-Forwarded-Proto: https`) gets `Secure` cookies and HSTS; `https_only` gives them
    # to every request, for a proxy that ends TLS without saying so.
    https_only: bool = False
    hsts_seconds: int = Field(default=31_536_000, ge=0)
    # The proxies whose X-Forwarded-For / X-Forwarded-Proto are believed: comma-separated
    # addresses or networks ("10.0.0.0/8"), "*" for any. Empty: the headers are ignored and
    # the client is the connection's peer.
    trusted_proxies: str = ""
    # The interactive API docs at /docs (served from this server, no CDN); /openapi.json stays.
    api_docs: bool = True

    # Abuse limits (docs/deployment.md "Abuse limits"). Who may create an account: anyone, holders of an
    # operator-made invite code, or nobody (operators create accounts with the CLI).
    registration: Literal["open", "invite", "closed"] = "open"
    invite_days: int = Field(default=7, gt=0)
    # Login and register attempts per client address and per username, e.g. "10/minute"
    # (the `limits` library's notation); counted in Redis when CHAT_SHELL_REDIS_URL is set.
    throttle_address_rate: str = "10/minute"
    throttle_username_rate: str = "20/hour"
    # Per user: turns running at once across conversations, one turn's wall time (also the
    # lifetime of its capability), streams open at once (per backend process), stored bytes.
    max_running_turns: int = Field(default=3, gt=0)
    turn_max_seconds: int = Field(default=900, gt=0)
    max_open_streams: int = Field(default=10, gt=0)
    max_stored_bytes: int = Field(default=1024 * 1024 * 1024, gt=0)

    # Attachments
    max_upload_bytes: int = Field(default=50 * 1024 * 1024, gt=0)
    max_extracted_chars: int = Field(default=20_000_000, gt=0)
    # Text extraction runs in worker processes; one file's extraction may use at most this much
    # wall-clock time, processor time and address space, and files whose structure is past the
    # caps below are refused before parsing (docs/features.md "Untrusted files").
    extraction_workers: int = Field(default=2, gt=0)
    extraction_timeout_seconds: float = Field(default=60.0, gt=0)
    extraction_cpu_seconds: int = Field(default=30, gt=0)
    extraction_memory_mb: int = Field(default=1024, ge=128)
    extraction_max_unpacked_mb: int = Field(default=200, gt=0)
    extraction_max_compression_ratio: float = Field(default=100.0, gt=1)
    extraction_max_html_mb: int = Field(default=10, gt=0)
    extraction_max_pdf_pages: int = Field(default=2000, gt=0)

    # Turns and their delivery. On SQLite the serving process runs every turn. On PostgreSQL
    # turns are jobs of a queue (procrastinate) that `chat-shell worker` processes run;
    # `worker_in_process` makes `serve` run one too (a small install, one process).
    worker_in_process: bool = False
    # Turns one worker process runs at once (its capacity, measured by `bench.bench_delivery`).
    worker_concurrency: int = Field(default=60, gt=0)
    # A worker silent this long is taken for dead: its turns run again on another worker.
    worker_restart_after_seconds: float = Field(default=10.0, gt=0)
    # At SIGTERM a worker ends its running turns within this long, then hands the rest back.
    worker_drain_seconds: float = Field(default=120.0, ge=0)
    # Admission: turns running at once in the whole service (None: workers x concurrency is the
    # operator's to set); past it a send gets 503 with Retry-After and the page retries.
    turn_capacity: int | None = Field(default=None, gt=0)
    # Admission per web process: streams open at once; past it a send gets 503 as well.
    stream_capacity: int = Field(default=400, gt=0)
    tool_call_limit: int = Field(default=30, gt=0)
    system_prompt: str | None = None
    event_log_retention_days: int = Field(default=7, ge=0)
    sse_ping_seconds: float = Field(default=15.0, gt=0)
    # MCP servers (docs/features.md "MCP servers"): a JSON or TOML file declaring them; read at startup.
    mcp_servers: Path | None = None
    # A stream that hears nothing from the broker re-reads the turn's log this often (the
    # fallback when live events from another replica do not arrive).
    stream_log_poll_seconds: float = Field(default=1.0, gt=0)
    # An open stream asks this often whether its session or token still holds (an account
    # disabled, a session logged out in another replica); in its own process it closes at once.
    stream_auth_check_seconds: float = Field(default=10.0, gt=0)

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
        "models",
        "service_token",
        "capability_key",
        "metrics_token",
        "local_model_file",
        "local_model_port",
        "local_model_cache",
        "local_model_server",
        "mcp_servers",
        mode="before",
    )
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("local_model")
    @classmethod
    def _known_local_model(cls, value: str) -> str:
        if value != "off":
            catalog_model(value)  # ValueError naming the choices
        return value

    @field_validator("throttle_address_rate", "throttle_username_rate")
    @classmethod
    def _rate_notation(cls, value: str) -> str:
        from limits import parse

        parse(value)  # ValueError naming the notation
        return value

    @property
    def turns_on_queue(self) -> bool:
        """Whether turns run as jobs of the queue (PostgreSQL) rather than in the serving process."""
        from sqlalchemy.engine import make_url

        return make_url(self.resolved_database_url).get_backend_name() == "postgresql"

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
            "pre_trigger_tokens": self.compaction_pre_trigger_tokens,
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
    def mcp_server_configs(self) -> dict[str, StreamableHttpServer | StdioServer]:
        """The declared MCP servers (none without CHAT_SHELL_MCP_SERVERS)."""
        return load_servers(self.mcp_servers) if self.mcp_servers is not None else {}

    @property
    def uses_remote_provider(self) -> bool:
        return bool(self.openai_api_key or self.openai_base_url)


@lru_cache
def get_settings() -> Settings:
    return Settings()
