"""The settings model: every setting's type, default, description, TOML key and variable.

One flat model, so the rest of Corral reads `settings.port`, `settings.egress_allow_private`
and so on. Each field carries a `Key` naming where it lives in corral.toml and how its
`CORRAL_*` variable is spelled and parsed; `corral.settings.sources` reads both, and
`corral.settings.render` prints the effective values and docs/configuration.md from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PlainValidator, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from corral.model_routes import ModelRoute
from corral.netpolicy import BYTES_BUDGET, IDLE_SECONDS, MAX_CONNECTIONS, EgressSettings
from corral.settings import checks
from corral.settings.checks import Flag, Positive
from corral.web_search_config import WebSearchConfig, parse_web_search

EnvKind = Literal["text", "csv", "json"]
"""How a variable's text becomes a value: as is (pydantic parses numbers), comma-separated,
or JSON (the tables of [[models.routes]] and [skills.anthropic])."""
Resolve = Literal["none", "path", "program", "database"]
"""Which values are paths made absolute at load (see `checks.absolute_path`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Key:
    """Where a setting is read from: its TOML key and its environment variables."""

    toml: str
    """Dotted: `server.port` is `port` in `[server]`; `web_search` is the whole table."""
    label: str | None = None
    """How messages and docs name the TOML key (default `[section] key`)."""
    aliases: tuple[str, ...] = ()
    """Variables read after `CORRAL_<NAME>`, first set wins (the standard OTEL_* ones)."""
    env: EnvKind = "text"
    secret: bool = False
    """Redacted by `corral config show`; its values never appear in error messages."""
    resolve: Resolve = "none"
    named_errors: bool = False
    """Its validator's messages already name the setting (the parsers of nested tables)."""
    doc_type: str | None = None

    @property
    def path(self) -> tuple[str, ...]:
        """The TOML key as a path of table names."""
        return tuple(self.toml.split("."))

    @property
    def display(self) -> str:
        """The TOML key as messages write it."""
        if self.label:
            return self.label
        *tables, key = self.path
        return f"[{'.'.join(tables)}] {key}" if tables else f"[{key}]"


WEB_SEARCH_KEYS: dict[str, str] = {
    "provider": "`searxng`, `brave` or `tavily`; unset: the `web_search` tool is refused.",
    "url": "The provider's root (required for searxng; the hosted APIs have defaults).",
    "api_key_env": "The NAME of the variable holding the provider's key (brave, tavily).",
    "max_results": "Results asked of the provider per search, 1 to 50 (default 10).",
    "max_uses": "Searches one turn may make when the agent sets no lower `max_uses`.",
    "timeout_seconds": "Budget of one provider call, up to 300 (default 15).",
}
"""The `[web_search]` keys (each also `CORRAL_WEB_SEARCH_<KEY>`), for the docs."""


class Settings(BaseSettings):
    """Everything configurable about a Corral process (docs/configuration.md lists it)."""

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        arbitrary_types_allowed=True,
        use_attribute_docstrings=True,
        validate_default=True,
    )

    env: Mapping[str, str] = Field(default_factory=dict, repr=False, exclude=True)
    """The server's environment, for providers' credentials (never forwarded to sandboxes)."""
    origins: Mapping[str, str] = Field(default_factory=dict, repr=False, exclude=True)
    """Where each setting not at its default came from (`corral config show`)."""

    host: Annotated[str, Key(toml="server.host")] = "127.0.0.1"
    """Interface the API (and a worker's /metrics) binds."""
    port: Annotated[int, Key(toml="server.port"), AfterValidator(checks.port)] = 8080
    """Port the API binds."""
    data_dir: Annotated[
        Path, Key(toml="server.data_dir", resolve="path"), AfterValidator(checks.cwd_path)
    ] = Path(".corral")
    """Sessions' workspaces, blobs, skills, the SQLite database, generated keys."""
    database_url: Annotated[
        str | None,
        Key(toml="server.database_url", secret=True, resolve="database"),
        AfterValidator(checks.cwd_database),
    ] = None
    """`postgresql://…` (shared by every process), `sqlite:///path` or a file path;
    unset: `DATA_DIR/corral.db`."""
    api_keys: Annotated[
        tuple[str, ...],
        Key(toml="server.api_keys", env="csv", secret=True),
        PlainValidator(checks.keys),
    ] = ()
    """Keys clients send as `x-api-key`; unset: one generated into `DATA_DIR/api_key`."""
    workers: Annotated[int, Key(toml="server.workers"), Field(ge=0)] = 256
    """Concurrent brain slots in this process (0 = API only)."""
    lease_seconds: Annotated[float, Key(toml="server.lease_seconds"), Positive] = 10.0
    """How long a silent worker keeps its sessions before another takes them over."""
    shutdown_grace_seconds: Annotated[
        float, Key(toml="server.shutdown_grace_seconds"), Positive
    ] = 20.0
    """On SIGTERM/SIGINT: how long brains may finish their current step (then another process
    takes their sessions at once) and requests finish before the process is killed; a second
    signal kills at once."""
    brain_memo_mib: Annotated[int, Key(toml="server.brain_memo_mib"), Field(ge=0)] = 64
    """Memory (estimated MiB) a process keeps of the sessions it drove last, so their next
    turn reads only the new events instead of the whole log again. Long conversations take
    the most; 0 turns the cache off (every turn reads its session's whole log)."""
    work_ttl_seconds: Annotated[int, Key(toml="server.work_ttl_seconds"), Positive] = 90
    """Lease of a self-hosted work item: a worker silent this long has lost it (its call in
    flight is answered with an error). 90 is what the SDK's worker assumes."""
    sandbox_idle_seconds: Annotated[float, Key(toml="server.sandbox_idle_seconds"), Positive] = (
        600.0
    )
    """How long an idle session keeps its sandbox process."""
    sandbox_disk_bytes: Annotated[int, Key(toml="server.sandbox_disk_bytes"), Positive] = (
        4 * 1024**3
    )
    """Disk quota of one sandbox's /workspace and outputs together (also the largest file)."""
    max_file_bytes: Annotated[int, Key(toml="server.max_file_bytes"), Positive] = 512 * 1024**2
    """Largest file the Files API accepts."""
    outputs_max_files: Annotated[int, Key(toml="server.outputs_max_files"), Positive] = 1000
    """Output file objects one session may have (files under /mnt/session/outputs)."""
    outputs_max_bytes_per_call: Annotated[
        int, Key(toml="server.outputs_max_bytes_per_call"), Positive
    ] = 512 * 1024**2
    """Bytes of outputs collected after one tool call; the rest is refused with a note."""
    outputs_max_bytes_per_session: Annotated[
        int, Key(toml="server.outputs_max_bytes_per_session"), Positive
    ] = 1024**3
    """Bytes of all of one session's output files together (sparse files count their size)."""
    sse_ping_seconds: Annotated[float, Key(toml="server.sse_ping_seconds"), Positive] = 15.0
    """Keep-alive interval on idle SSE streams (the SDK's read timeout is 600 s)."""
    store_timeout_seconds: Annotated[float, Key(toml="server.store_timeout_seconds"), Positive] = (
        10.0
    )
    """Longest wait for the store (a database connection, a statement, a SQLite lock) before
    a request answers 503 with nothing applied; `/health` answers 503 too while it lasts."""
    bwrap: Annotated[
        str, Key(toml="server.bwrap", resolve="program"), AfterValidator(checks.cwd_program)
    ] = "bwrap"
    """The bubblewrap program: a name looked up on PATH, or a path to it."""
    sandbox_uid_range: Annotated[
        tuple[int, int],
        Key(toml="server.sandbox_uid_range", named_errors=True, doc_type='"FIRST-LAST"'),
        PlainValidator(checks.uid_range),
    ] = (1_879_048_192, 1_879_113_727)
    """Host uids (and gids of the same numbers) for sandboxes when the server runs as root:
    one per session, owning nothing but its workspace and outputs. The default,
    0x70000000-0x7000ffff, lies where systemd's UIDS-GIDS.md assigns nothing (above its
    container ranges, below 2^31) and above useradd's subordinate ids (SUB_UID_MAX defaults
    to 600100000). No account or other service may use these uids, and two servers with
    different data dirs on one host need ranges that do not overlap."""
    eager_sandboxes: Annotated[Flag, Key(toml="server.eager_sandboxes")] = False
    """Provision sandboxes before inference, as the coupled design did (benchmarks only)."""
    model_retry_max_seconds: Annotated[
        float, Key(toml="server.model_retry_max_seconds"), Positive
    ] = 120.0
    """How long a turn keeps retrying a failing model call, from its first failure. Waits
    follow the provider's `retry-after` (or rate-limit reset) headers, else exponential
    backoff; a wait that would end past this bound ends the retries at once."""
    model_stall_timeout_seconds: Annotated[
        float, Key(toml="server.model_stall_timeout_seconds"), Positive
    ] = 120.0
    """A model call that sends nothing (no answer, no streamed byte) for this long is given
    up and retried, reported as a `session.error`. Raise it for a local model that can take
    longer to its first token (loading, a long prompt on a CPU)."""
    vault_key: Annotated[
        str | None, Key(toml="server.vault_key", secret=True), AfterValidator(checks.vault_key)
    ] = None
    """Comma-separated vault keys, newest first (see docs/vaults.md); unset: a key generated
    once into `DATA_DIR/vault.key`."""
    log_level: Annotated[str, Key(toml="server.log_level"), PlainValidator(checks.log_level)] = (
        "INFO"
    )
    """Least severe log records written: DEBUG, INFO, WARNING, ERROR or CRITICAL."""
    environment_key: Annotated[str | None, Key(toml="hands.environment_key", secret=True)] = None
    """`corral hands`: the self_hosted environment's key (`corral env-key create`)."""
    egress_allow_private: Annotated[
        tuple[str, ...],
        Key(toml="egress.allow_private", env="csv", named_errors=True),
        PlainValidator(checks.allow_private),
    ] = ()
    """Private destinations a sandbox may reach when its environment lists the host:
    `host:port`, a CIDR or IP (all ports), or a name (all its ports). Nothing else private."""
    egress_max_connections: Annotated[int, Key(toml="egress.max_connections"), Positive] = (
        MAX_CONNECTIONS
    )
    """Concurrent connections through one sandbox's egress proxy."""
    egress_bytes_budget: Annotated[int, Key(toml="egress.bytes_budget"), Positive] = BYTES_BUDGET
    """Bytes one sandbox may relay through its egress proxy over its life."""
    egress_idle_seconds: Annotated[float, Key(toml="egress.idle_seconds"), Positive] = IDLE_SECONDS
    """A relayed connection with no bytes either way for this long is closed."""
    metrics_public: Annotated[Flag, Key(toml="metrics.public")] = False
    """Serve /metrics without an API key."""
    metrics_port: Annotated[int | None, Key(toml="metrics.port"), AfterValidator(checks.port)] = (
        None
    )
    """Where `corral worker` serves its /metrics (a worker has no API port; `corral serve`
    always serves /metrics on its own port)."""
    tracing_endpoint: Annotated[
        str | None,
        Key(
            toml="tracing.endpoint",
            aliases=("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ),
        PlainValidator(checks.traces_url),
    ] = None
    """An OTLP/HTTP collector's base URL (`/v1/traces` is appended), or in
    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` a full traces URL. Unset: no traces are exported."""
    tracing_service_name: Annotated[
        str,
        Key(toml="tracing.service_name", aliases=("OTEL_SERVICE_NAME",)),
        AfterValidator(checks.non_empty),
    ] = "corral"
    """The traces' `service.name`."""
    model_routes: Annotated[
        tuple[ModelRoute, ...],
        Key(
            toml="models.routes",
            label="[[models.routes]]",
            env="json",
            named_errors=True,
            doc_type="array of tables",
        ),
        PlainValidator(checks.routes),
    ] = ()
    """Which provider serves which `agent.model` (first match wins; `corral-scripted*` and
    `claude-*` routes follow them). Keys: match, provider, base_url, api_key_env, model,
    price, context_window, compaction_threshold, compaction_model (README "Models")."""
    anthropic_skills: Annotated[
        Mapping[str, Path],
        Key(
            toml="skills.anthropic",
            label="[skills.anthropic]",
            env="json",
            named_errors=True,
            doc_type="table",
        ),
        PlainValidator(checks.anthropic_skills),
    ] = Field(default_factory=dict)
    """Anthropic skill ids (`xlsx`) -> absolute paths of local skill directories (each with a
    SKILL.md), so agents may reference `{type: "anthropic", skill_id}` (docs/skills.md)."""
    web_search: Annotated[
        WebSearchConfig | None,
        Key(toml="web_search", named_errors=True, doc_type="table"),
        PlainValidator(lambda value: value),
    ] = None
    """The provider serving the `web_search` tool (unset: enabling it is refused; see
    docs/web_search.md)."""

    @field_validator("web_search", mode="before")
    @classmethod
    def _web_search(cls, value: object, info: ValidationInfo) -> WebSearchConfig | None:
        # the table merged with CORRAL_WEB_SEARCH_* and the key read from the named variable
        if isinstance(value, WebSearchConfig):
            return value
        return parse_web_search(value, info.data.get("env", {}))

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only the values passed in: `corral.settings.sources` reads the file and the
        environment itself, recording where each value came from."""
        return (init_settings,)

    @property
    def egress(self) -> EgressSettings:
        """The `egress_*` settings, as the sandboxes' egress proxies take them."""
        return EgressSettings(
            allow_private=self.egress_allow_private,
            max_connections=self.egress_max_connections,
            bytes_budget=self.egress_bytes_budget,
            idle_seconds=self.egress_idle_seconds,
        )

    @property
    def sqlite_path(self) -> Path:
        """The embedded database file."""
        return self.data_dir / "corral.db"

    def source(self, name: str) -> str:
        """Where setting `name` came from: `default`, or the file, variable or flag."""
        return self.origins.get(name, "default")


def keys() -> dict[str, Key]:
    """Every setting's `Key`, in declaration order."""
    out: dict[str, Key] = {}
    for name, info in Settings.model_fields.items():
        found = [m for m in info.metadata if isinstance(m, Key)]
        if found:
            out[name] = found[0]
    return out


def env_names(name: str, key: Key) -> tuple[str, ...]:
    """The variables setting `name` is read from, in precedence order."""
    return (f"CORRAL_{name.upper()}", *key.aliases)


def early_log_level(environ: Mapping[str, str]) -> str:
    """`CORRAL_LOG_LEVEL` if valid, else INFO: logging is set up before the settings load,
    which then reports a bad value like any other."""
    try:
        return checks.log_level(environ.get("CORRAL_LOG_LEVEL") or "INFO")
    except ValueError:
        return "INFO"


def default_of(name: str) -> Any:
    """Setting `name`'s default as declared (before paths are made absolute)."""
    info = Settings.model_fields[name]
    return info.get_default(call_default_factory=True)
