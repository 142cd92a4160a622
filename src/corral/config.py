"""Settings, loaded once (CLI flags > environment > corral.toml > defaults) and passed down.

No other module reads the process environment.
"""

from __future__ import annotations

import os
import re
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from corral.model_routes import ModelRoute, parse_routes
from corral.netpolicy import (
    BYTES_BUDGET,
    IDLE_SECONDS,
    MAX_CONNECTIONS,
    EgressSettings,
    parse_rule,
)
from corral.web_search_config import WebSearchConfig, parse_web_search

DEFAULT_DATA_DIR = Path(".corral")
"""Relative to the working directory the command starts in."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything configurable about a Corral process."""

    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: Path = DEFAULT_DATA_DIR
    """Made absolute at load, against the working directory (see `_absolute_paths`)."""
    database_url: str | None = None
    api_keys: tuple[str, ...] = ()
    workers: int = 256
    """Concurrent brain slots in this process (0 = API only)."""
    lease_seconds: float = 10.0
    work_ttl_seconds: int = 90
    """Lease of a self-hosted work item: a worker silent this long has lost it (its call in
    flight is answered with an error). 90 is what the SDK's worker assumes."""
    sandbox_idle_seconds: float = 600.0
    sandbox_disk_bytes: int = 4 * 1024**3
    """Disk quota of one sandbox's /workspace and outputs together (also the largest file)."""
    max_file_bytes: int = 512 * 1024 * 1024
    outputs_max_files: int = 1000
    """Output file objects one session may have (files under /mnt/session/outputs)."""
    outputs_max_bytes_per_call: int = 512 * 1024 * 1024
    """Bytes of outputs collected after one tool call; the rest is refused with a note."""
    outputs_max_bytes_per_session: int = 1024 * 1024 * 1024
    """Bytes of all of one session's output files together (sparse files count their size)."""
    sse_ping_seconds: float = 15.0
    """Keep-alive interval on idle SSE streams (the SDK's read timeout is 600 s)."""
    bwrap: str = "bwrap"
    sandbox_uid_range: tuple[int, int] = (1_879_048_192, 1_879_113_727)
    """Host uids (and gids of the same numbers) for sandboxes when the server runs as root:
    one per session, owning nothing but its workspace and outputs. The default,
    0x70000000-0x7000ffff, lies where systemd's UIDS-GIDS.md assigns nothing (above its
    container ranges, below 2^31) and above useradd's subordinate ids (SUB_UID_MAX defaults
    to 600100000). No account or other service may use these uids, and two servers with
    different data dirs on one host need ranges that do not overlap."""
    model_routes: tuple[ModelRoute, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    """The server's environment, for providers' credentials (never forwarded to sandboxes)."""
    eager_sandboxes: bool = False
    """Provision sandboxes before inference, as the coupled design did (benchmarks only)."""
    egress_allow_private: tuple[str, ...] = ()
    """Private destinations a sandbox may reach when its environment lists the host:
    `host:port`, a CIDR or IP (all ports), or a name (all its ports). Nothing else private."""
    egress_max_connections: int = MAX_CONNECTIONS
    """Concurrent connections through one sandbox's egress proxy."""
    egress_bytes_budget: int = BYTES_BUDGET
    """Bytes one sandbox may relay through its egress proxy over its life."""
    egress_idle_seconds: float = IDLE_SECONDS
    """A relayed connection with no bytes either way for this long is closed."""
    vault_key: str | None = None
    """`CORRAL_VAULT_KEY`: comma-separated vault keys, newest first (see docs/vaults.md);
    unset means a key generated once into `data_dir/vault.key`."""
    metrics_public: bool = False
    """`[metrics] public` / `CORRAL_METRICS_PUBLIC=1`: serve /metrics without an API key."""
    metrics_port: int | None = None
    """`[metrics] port` / `--metrics-port`: where `corral worker` serves its /metrics (a
    worker has no API port; `corral serve` always serves /metrics on its own port)."""
    tracing_endpoint: str | None = None
    """`[tracing] endpoint` / `OTEL_EXPORTER_OTLP_ENDPOINT`: an OTLP/HTTP collector's base
    URL (`/v1/traces` is appended), or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, a full traces
    URL. None: no traces are exported."""
    tracing_service_name: str = "corral"
    """`[tracing] service_name` / `OTEL_SERVICE_NAME`: the traces' `service.name`."""
    anthropic_skills: Mapping[str, Path] = field(default_factory=dict)
    """`[skills.anthropic]`: Anthropic skill ids (`xlsx`) -> local skill directories (each
    with a SKILL.md), so agents may reference `{type: "anthropic", skill_id}` (docs/skills.md)."""
    web_search: WebSearchConfig | None = None
    """`[web_search]` / `CORRAL_WEB_SEARCH_*`: the provider serving the `web_search` tool
    (None: enabling it is refused; see docs/web_search.md)."""

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


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> Settings:
    """Merge the sources; raises ValueError with a clear message on bad config."""
    env = dict(os.environ if environ is None else environ)
    values: dict[str, Any] = {}
    path = config_file or Path(env.get("CORRAL_CONFIG", "corral.toml"))
    doc = tomllib.loads(path.read_text()) if path.exists() else {}
    values.update(_from_toml(doc))
    values.update(_from_env(env))
    values["web_search"] = parse_web_search(doc.get("web_search"), env)
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return _absolute_paths(replace(Settings(env=env), **values))


def _absolute_paths(settings: Settings) -> Settings:
    """Every path setting absolute, resolved once against the working directory at load.

    Nothing else may resolve them later: sandboxes, their launcher and git run from `/`, so a
    relative data dir names `//.corral/...` to them (every sandbox failed to start)."""
    url = settings.database_url
    if url is not None and url.startswith("sqlite:///"):
        url = "sqlite:///" + str(absolute_path(Path(url.removeprefix("sqlite:///"))))
    bwrap = settings.bwrap  # a bare name is looked up on PATH; a relative path is made absolute
    return replace(
        settings,
        data_dir=absolute_path(settings.data_dir),
        database_url=url,
        bwrap=str(absolute_path(Path(bwrap))) if "/" in bwrap else bwrap,
    )


def absolute_path(path: Path) -> Path:
    """`path` with `~` expanded, absolute and normalised (`a/../b` is `b`), symlinks kept."""
    return Path(os.path.abspath(path.expanduser()))


def _from_toml(doc: dict[str, Any]) -> dict[str, Any]:
    server = doc.get("server", {})
    out: dict[str, Any] = {
        k: server[k]
        for k in (
            "host",
            "port",
            "workers",
            "lease_seconds",
            "work_ttl_seconds",
            "sandbox_idle_seconds",
            "sandbox_disk_bytes",
            "bwrap",
            "database_url",
            "outputs_max_files",
            "outputs_max_bytes_per_call",
            "outputs_max_bytes_per_session",
        )
        if k in server
    }
    if "data_dir" in server:
        out["data_dir"] = Path(server["data_dir"])
    if "sandbox_uid_range" in server:
        out["sandbox_uid_range"] = _uid_range(server["sandbox_uid_range"])
    if "models" in doc:
        out["model_routes"] = tuple(parse_routes(doc["models"]))
    out.update(_observability_from_toml(doc))
    skills = doc.get("skills", {})
    if not isinstance(skills, dict):
        raise ValueError("[skills] must be a table")
    if "anthropic" in skills:
        out["anthropic_skills"] = _anthropic_skills(skills["anthropic"])
    egress = doc.get("egress", {})
    if "allow_private" in egress:
        out["egress_allow_private"] = _allow_private(egress["allow_private"])
    for key, kind in _EGRESS_NUMBERS.items():
        if key in egress:
            out[f"egress_{key}"] = _positive(f"[egress] {key}", kind(egress[key]))
    return out


def _observability_from_toml(doc: dict[str, Any]) -> dict[str, Any]:
    """`[metrics]` and `[tracing]` (docs/observability.md); wrong types are refused."""
    out: dict[str, Any] = {}
    metrics, tracing = doc.get("metrics", {}), doc.get("tracing", {})
    if "public" in metrics:
        if not isinstance(metrics["public"], bool):
            raise ValueError("[metrics] public must be true or false")
        out["metrics_public"] = metrics["public"]
    if "port" in metrics:
        out["metrics_port"] = _port("[metrics] port", metrics["port"])
    for key in ("endpoint", "service_name"):
        if key in tracing:
            if not isinstance(tracing[key], str) or not tracing[key].strip():
                raise ValueError(f"[tracing] {key} must be a non-empty string")
            out[f"tracing_{key}"] = tracing[key].strip()
    if "tracing_endpoint" in out:
        out["tracing_endpoint"] = _traces_url("[tracing] endpoint", out["tracing_endpoint"])
    return out


def _observability_from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """`CORRAL_METRICS_PUBLIC`, `CORRAL_METRICS_PORT` and the standard OTEL_* variables."""
    out: dict[str, Any] = {}
    public = env.get("CORRAL_METRICS_PUBLIC")
    if public:
        if public not in ("0", "1"):
            raise ValueError(f"CORRAL_METRICS_PUBLIC must be 0 or 1, got {public!r}")
        out["metrics_public"] = public == "1"
    if env.get("CORRAL_METRICS_PORT"):
        out["metrics_port"] = _port("CORRAL_METRICS_PORT", env["CORRAL_METRICS_PORT"])
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        url = env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"].strip()
        out["tracing_endpoint"] = _traces_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url, full=True)
    elif env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        url = env["OTEL_EXPORTER_OTLP_ENDPOINT"].strip()
        out["tracing_endpoint"] = _traces_url("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    if env.get("OTEL_SERVICE_NAME"):
        out["tracing_service_name"] = env["OTEL_SERVICE_NAME"].strip()
    return out


def _traces_url(name: str, url: str, *, full: bool = False) -> str:
    """An OTLP/HTTP traces URL; a base URL gets `/v1/traces` as the OTLP spec says."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{name} must be an http(s) URL, got {url!r}")
    return url if full else url.rstrip("/") + "/v1/traces"


def _port(name: str, value: object) -> int:
    try:
        port = int(str(value))
    except ValueError:
        port = -1
    if not 0 < port < 65536 or isinstance(value, bool):
        raise ValueError(f"{name} must be a port number, got {value!r}")
    return port


_SKILL_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z")


def _anthropic_skills(table: object) -> dict[str, Path]:
    """`[skills.anthropic]` entries, each a directory holding a SKILL.md that sandboxes (their
    own uids) can read; raises ValueError naming the entry."""
    if not isinstance(table, dict):
        raise ValueError('[skills.anthropic] must be a table like xlsx = "/opt/skills/xlsx"')
    out: dict[str, Path] = {}
    for skill_id, value in table.items():
        where = f"[skills.anthropic] {skill_id}"
        if not _SKILL_ID.match(skill_id) or skill_id.startswith("skill_"):
            raise ValueError(f"{where}: not an Anthropic skill id (such as xlsx or pdf)")
        if not isinstance(value, str) or not value.startswith("/"):
            raise ValueError(f"{where}: must be the absolute path of a skill directory")
        path = Path(value)
        skill_md = path / "SKILL.md"
        if not path.is_dir() or not skill_md.is_file():
            raise ValueError(f"{where}: {value} is not a directory with a SKILL.md")
        if path.stat().st_mode & 0o005 != 0o005 or skill_md.stat().st_mode & 0o004 == 0:
            raise ValueError(
                f"{where}: {value} and its SKILL.md must be readable by all (sandboxes run "
                "as their own users)"
            )
        out[skill_id] = path
    return out


_EGRESS_NUMBERS: dict[str, type[int] | type[float]] = {
    "max_connections": int,
    "bytes_budget": int,
    "idle_seconds": float,
}


def _allow_private(entries: object) -> tuple[str, ...]:
    """Validated `allow_private` entries (a list of strings)."""
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ValueError("[egress] allow_private must be a list of strings")
    for entry in entries:
        parse_rule(entry)
    return tuple(e.strip() for e in entries if e.strip())


def _positive(name: str, value: float) -> Any:
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def _egress_from_env(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if env.get("CORRAL_EGRESS_ALLOW_PRIVATE"):
        out["egress_allow_private"] = _allow_private(env["CORRAL_EGRESS_ALLOW_PRIVATE"].split(","))
    for key, kind in _EGRESS_NUMBERS.items():
        if env.get(f"CORRAL_EGRESS_{key.upper()}"):
            value = kind(env[f"CORRAL_EGRESS_{key.upper()}"])
            out[f"egress_{key}"] = _positive(f"CORRAL_EGRESS_{key.upper()}", value)
    return out


def _work_from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """`CORRAL_WORK_TTL_SECONDS`: self-hosted work leases (docs/self_hosted.md)."""
    if not env.get("CORRAL_WORK_TTL_SECONDS"):
        return {}
    return {
        "work_ttl_seconds": _positive(
            "CORRAL_WORK_TTL_SECONDS", int(env["CORRAL_WORK_TTL_SECONDS"])
        )
    }


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if env.get("CORRAL_DATA_DIR"):
        out["data_dir"] = Path(env["CORRAL_DATA_DIR"])
    if env.get("CORRAL_DATABASE_URL"):
        out["database_url"] = env["CORRAL_DATABASE_URL"]
    if env.get("CORRAL_LEASE_SECONDS"):
        out["lease_seconds"] = float(env["CORRAL_LEASE_SECONDS"])
    if env.get("CORRAL_SSE_PING_SECONDS"):
        out["sse_ping_seconds"] = float(env["CORRAL_SSE_PING_SECONDS"])
    if env.get("CORRAL_WORKERS"):
        out["workers"] = int(env["CORRAL_WORKERS"])
    if env.get("CORRAL_VAULT_KEY"):
        out["vault_key"] = env["CORRAL_VAULT_KEY"]
    if env.get("CORRAL_EAGER_SANDBOXES") == "1":
        out["eager_sandboxes"] = True
    out.update(_egress_from_env(env))
    out.update(_work_from_env(env))
    out.update(_observability_from_env(env))
    for key in ("max_files", "max_bytes_per_call", "max_bytes_per_session"):
        if env.get(f"CORRAL_OUTPUTS_{key.upper()}"):
            out[f"outputs_{key}"] = int(env[f"CORRAL_OUTPUTS_{key.upper()}"])
    if env.get("CORRAL_SANDBOX_UID_RANGE"):
        out["sandbox_uid_range"] = _uid_range(env["CORRAL_SANDBOX_UID_RANGE"])
    if env.get("CORRAL_API_KEYS"):
        out["api_keys"] = tuple(k.strip() for k in env["CORRAL_API_KEYS"].split(",") if k.strip())
    return out


def _uid_range(value: object) -> tuple[int, int]:
    """A uid range from "FIRST-LAST" or [FIRST, LAST]; raises ValueError naming the fault."""
    first: object = None
    last: object = None
    if isinstance(value, list) and len(value) == 2:
        first, last = value
    elif isinstance(value, str):
        head, _, tail = value.strip().partition("-")
        if head.strip().isdigit() and tail.strip().isdigit():
            first, last = int(head), int(tail)
    if type(first) is not int or type(last) is not int:
        raise ValueError(f'sandbox_uid_range must look like "FIRST-LAST", got {value!r}')
    # 0 is root, 65534 nobody, 65535 and 2^32-1 are (uid_t)-1 to old and new software
    if not 0 < first <= last < 2**32 - 1 or any(first <= u <= last for u in (65534, 65535)):
        raise ValueError(f"sandbox_uid_range {first}-{last} is not a range of ordinary uids")
    return first, last


def ensure_api_keys(settings: Settings) -> tuple[Settings, str | None]:
    """Settings with keys; generates and stores one (mode 0600) on first start.

    Returns the new key when one was generated, so the caller can print it once.
    """
    if settings.api_keys:
        return settings, None
    key_file = settings.data_dir / "api_key"
    if key_file.exists():
        return replace(settings, api_keys=(key_file.read_text().strip(),)), None
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = "crl_" + secrets.token_urlsafe(32)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return replace(settings, api_keys=(key,)), key
