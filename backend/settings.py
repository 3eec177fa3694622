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
    # Each field's docstring is its description in docs/configuration.md (`scripts/configuration_doc.py`).
    model_config = SettingsConfigDict(
        env_prefix="CHAT_SHELL_", env_file=".env", extra="ignore", use_attribute_docstrings=True
    )

    # Storage
    data_dir: Path = Path("data")
    """Where the SQLite database file, uploads and caches are kept."""
    database_url: str | None = None
    """The database, e.g. `postgresql+asyncpg://user:pass@host:5432/db`; unset: SQLite in the data
    directory. PostgreSQL is needed for several replicas and the job-queue workers."""
    sqlite_busy_timeout_seconds: float = Field(default=30.0, gt=0)
    """SQLite only: how long a write waits for the database's single write lock; past it the
    request answers 503 `database_busy` (nothing stored). Use PostgreSQL for many concurrent writers."""
    redis_url: str | None = None
    """Set it to run several backend replicas (turn events fan out through Redis)."""

    # Models and providers
    models: Path | None = None
    """A models file (TOML or JSON, docs/features.md "Models"): the models users may choose, from
    several providers. Without it the single provider below is the one model."""
    openai_base_url: str | None = Field(default=None, validation_alias=AliasChoices("OPENAI_BASE_URL"))
    """An OpenAI-compatible endpoint; when this or the key is set, that provider is used instead of
    the local model."""
    openai_api_key: str | None = Field(default=None, validation_alias=AliasChoices("OPENAI_API_KEY"))
    """The provider's API key."""
    model: str | None = None
    """The model id; its profile (window, output budget, tokenizer) comes from the built-in table.
    Unset: the local model."""
    context_window: int | None = Field(default=None, gt=0)
    """Overrides the model's context window (tokens); unset: from its profile."""
    max_output_tokens: int | None = Field(default=None, gt=0)
    """Overrides the model's output budget (tokens); unset: from its profile."""
    provider_timeout_seconds: float = Field(default=120.0, gt=0)
    """Time limit of one model call."""

    # The embedded local model (docs/local-model.md)
    local_model: str = "auto"
    """When no provider is set: `auto` (the default catalog model), a catalog model's name, or `off`
    for none."""
    local_model_file: Path | None = None
    """A GGUF file to serve instead of the catalog model's (set `CHAT_SHELL_MODEL` to name its profile)."""
    local_model_port: int | None = Field(default=None, gt=0, lt=65536)
    """The loopback port to prefer for the local server; another free one is used when it is taken."""
    local_model_cache: Path | None = None
    """Where catalog models are downloaded and kept; unset: `~/.cache/chat-shell/models`."""
    local_model_server: str | None = None
    """A program taking `llama-server` options to serve the model with, instead of the bundled xllamacpp."""
    local_model_startup_timeout_seconds: float = Field(default=120.0, gt=0)
    """How long the local server may take to load and answer its first decode before it counts as failed."""

    # Summary compaction (SPEC 4, 5.3), for every model unless `profiles` says otherwise.
    summary_timeout_seconds: float = Field(default=120.0, gt=0)
    """Time limit of one summarizer call (the provider timeout plus an in-process backstop)."""
    summary_temperature: float = Field(default=CompactionSettings.summary_temperature, ge=0, le=2)
    """Sampling temperature of summarizer calls: greedy keeps the facts best (`bench_summary_facts`);
    answers keep the provider's own sampling."""
    compaction_enabled: bool = True
    """`false`: no summary compaction (the emergency trim and the refusal still apply)."""
    compaction_trigger_tokens: int | None = Field(default=None, gt=0)
    """Summarize when the estimated request reaches this many tokens; unset: 0.85 x the available room."""
    compaction_keep_tokens: int | None = Field(default=None, gt=0)
    """The request after compaction (fixed overhead and summary included) is at most this; unset:
    0.45 x the available room."""
    compaction_ahead: bool = True
    """Compaction ahead of time: after a turn, a conversation whose next request is estimated at or
    above the pre-trigger is compacted in the background."""
    generated_titles: bool = True
    """After the first reply of a conversation the page created with `generate_title`, the
    summarizer's model writes a short title in place of the first line."""
    compaction_pre_trigger_tokens: int | None = Field(default=None, gt=0)
    """The pre-trigger of compaction ahead of time (at most the trigger); unset: 0.7 x the trigger."""
    compaction_chunk_tokens: int | None = Field(default=None, gt=0)
    """History to summarize goes to the summarizer in chunks of this size, in order, each folding in
    the summary so far; unset: from the profile (12000)."""
    compaction_overhead_tokens: int | None = Field(default=None, ge=0)
    """Provider-side fixed overhead assumed until calibration has learned it; unset: from the
    profile (4000)."""
    summary_max_tokens: int | None = Field(default=None, gt=0)
    """Hard cap of a summary (a longer one gets a second, shortening pass, then a cut); unset: from
    the profile (1500)."""
    compaction_heartbeat_seconds: float = Field(default=5.0, gt=0)
    """Interval of the `context.compaction` `in_progress` events while a summary is written."""
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per-model profile fields as JSON, e.g. `{"gpt-4o": {"trigger_tokens": 49152, "keep_tokens":
    24000}}`; `"*"` applies to every model. Wins over the flat settings above (docs/features.md
    "Context budget and summary compaction" lists the fields)."""

    # Where chat_shell runs
    runtime_mode: Literal["package", "service"] = "package"
    """`package` runs turns in this process; `service` in a separate `chat-shell service` process
    reached over HTTP."""
    service_url: str = "http://127.0.0.1:8100"
    """Service mode: where the chat_shell service listens."""
    service_token: str | None = None
    """Required in service mode, the same value on both sides (a strong secret, docs/deployment.md
    "Secrets"): authenticates the backend to the service."""
    capability_key: str | None = None
    """Service mode, backend only: signs the per-turn capabilities the service reads history and
    attachments with. Required there, the same on every backend replica, never the service token;
    generated per process otherwise."""
    backend_url: str = "http://127.0.0.1:8000"
    """Service mode: where the chat_shell service reaches this backend (sent with every turn)."""

    # Accounts and HTTP
    password_hash_profile: Literal["RFC_9106_LOW_MEMORY", "RFC_9106_HIGH_MEMORY", "CHEAPEST"] = (
        "RFC_9106_LOW_MEMORY"
    )
    """The argon2id cost of password hashes; `CHEAPEST` exists for test suites only."""
    session_days: int = Field(default=14, gt=0)
    """Lifetime of a browser session (cookie and server side)."""
    token_days: int = Field(default=90, gt=0, le=3650)
    """Lifetime of an API token made without `expires_in_days`."""
    max_request_bytes: int = Field(default=1_000_000, gt=0)
    """The largest JSON request body."""

    # HTTPS and proxies (SECURITY.md)
    https_only: bool = False
    """`Secure` cookies and HSTS on every request, not only those over HTTPS (TLS to this process, or
    a trusted proxy's `X-Forwarded-Proto: https`): for a proxy that ends TLS without saying so."""
    hsts_seconds: int = Field(default=31_536_000, ge=0)
    """`max-age` of HSTS on HTTPS responses (0: no HSTS)."""
    trusted_proxies: str = ""
    """The proxies whose `X-Forwarded-For` / `X-Forwarded-Proto` are believed: comma-separated
    addresses or networks (`10.0.0.0/8`), `*` for any. Empty: the headers are ignored and the client
    is the connection's peer."""
    api_docs: bool = True
    """The interactive API docs at `/docs` (served from this server, no CDN); `/openapi.json` stays."""

    # Abuse limits (docs/deployment.md "Abuse limits")
    registration: Literal["open", "invite", "closed"] = "open"
    """Who may create an account: anyone, holders of an operator-made invite code, or nobody
    (operators create accounts with the CLI)."""
    invite_days: int = Field(default=7, gt=0)
    """Lifetime of an invite code."""
    throttle_address_rate: str = "10/minute"
    """Login and register attempts per client address (the `limits` library's notation); past it
    429 `too_many_attempts`. Counted in Redis when `CHAT_SHELL_REDIS_URL` is set."""
    throttle_username_rate: str = "20/hour"
    """Login and register attempts per username, like the address rate."""
    max_running_turns: int = Field(default=3, gt=0)
    """Turns running at once per user, across conversations (429 `too_many_running_turns`)."""
    turn_max_seconds: int = Field(default=900, gt=0)
    """One turn's wall time (then it ends `failed` with `turn_time_limit`), also the lifetime of its
    capability."""
    max_open_streams: int = Field(default=10, gt=0)
    """Event streams open at once per user, per backend process (429 `too_many_streams`)."""
    max_stored_bytes: int = Field(default=1024 * 1024 * 1024, gt=0)
    """Stored attachment bytes per user (413 `storage_quota_exceeded`)."""

    # Attachments (docs/features.md "Untrusted files")
    max_upload_bytes: int = Field(default=50 * 1024 * 1024, gt=0)
    """The largest upload."""
    max_extracted_chars: int = Field(default=20_000_000, gt=0)
    """The most characters of text kept from one attachment's extraction."""
    extraction_workers: int = Field(default=2, gt=0)
    """Worker processes extracting attachment text."""
    extraction_timeout_seconds: float = Field(default=60.0, gt=0)
    """Wall-clock limit of one file's extraction; past it the worker is killed."""
    extraction_cpu_seconds: int = Field(default=30, gt=0)
    """Processor-time limit of one file's extraction (`RLIMIT_CPU`)."""
    extraction_memory_mb: int = Field(default=1024, ge=128)
    """Address-space limit of an extraction worker (`RLIMIT_AS`; about 70 MB of it is the interpreter
    and the parsers)."""
    extraction_max_unpacked_mb: int = Field(default=200, gt=0)
    """A DOCX or XLSX whose parts unpack to more is refused before parsing."""
    extraction_max_compression_ratio: float = Field(default=100.0, gt=1)
    """A DOCX or XLSX part (over 100 KB) that unpacks to more than this many times its packed size
    is refused."""
    extraction_max_html_mb: int = Field(default=10, gt=0)
    """A larger HTML page is refused rather than parsed."""
    extraction_max_pdf_pages: int = Field(default=2000, gt=0)
    """A PDF with more pages is refused."""

    # Turns and their delivery. On SQLite the serving process runs every turn. On PostgreSQL
    # turns are jobs of a queue (procrastinate) that `chat-shell worker` processes run.
    worker_in_process: bool = False
    """PostgreSQL: `serve` runs a queue worker too (a small install, one process)."""
    worker_concurrency: int = Field(default=60, gt=0)
    """Turns one worker process runs at once (its capacity, measured by `bench.bench_delivery`)."""
    worker_restart_after_seconds: float = Field(default=10.0, gt=0)
    """A worker silent this long is taken for dead: its turns run again on another worker."""
    worker_drain_seconds: float = Field(default=120.0, ge=0)
    """At SIGTERM a worker ends its running turns within this long, then hands the rest back."""
    turn_capacity: int | None = Field(default=None, gt=0)
    """Admission: turns running at once in the whole service; past it a send gets 503 with
    `Retry-After` and the page retries. Unset: no limit (workers x concurrency is the operator's to set)."""
    stream_capacity: int = Field(default=400, gt=0)
    """Admission per web process: streams open at once; past it a send gets 503 as well."""
    tool_call_limit: int = Field(default=30, gt=0)
    """Model/tool rounds per turn before the tool-limit recovery reply."""
    system_prompt: str | None = None
    """A system prompt for every turn (before the chat's own instructions)."""
    event_log_retention_days: int = Field(default=7, ge=0)
    """Finished turns' event logs are pruned after this many days (0 keeps them)."""
    sse_ping_seconds: float = Field(default=15.0, gt=0)
    """Keep-alive comment interval on idle event streams."""
    mcp_servers: Path | None = None
    """A JSON or TOML file declaring the MCP servers whose tools turns may use (docs/features.md "MCP
    servers"); read at startup, in service mode by the `chat-shell service` process."""
    stream_log_poll_seconds: float = Field(default=1.0, gt=0)
    """How often a stream that hears nothing from the broker re-reads the turn's log (the fallback
    when live events from another replica do not arrive)."""
    stream_auth_check_seconds: float = Field(default=10.0, gt=0)
    """How often an open stream checks that its session or token still holds (an account disabled,
    a session logged out in another replica); in its own process it closes at once."""

    # Operators
    telemetry_enabled: bool = True
    """OpenTelemetry traces and Prometheus metrics (off: no-ops)."""
    metrics_token: str | None = None
    """A bearer token a Prometheus scraper sends to `GET /metrics` (a strong secret; refused at start
    when weak); without it only operator accounts can read `/metrics`."""
    log_json: bool = False
    """Log JSON lines instead of text; every line carries `trace_id`/`span_id`."""
    log_level: str = "INFO"
    """The log level; even at `DEBUG`, SQL parameters are not logged."""

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
