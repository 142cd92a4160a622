"""The checks behind the settings model's fields: each takes a value as read from a source
and returns it validated (paths absolute) or raises ValueError saying what is wrong, without
echoing a secret. `model.py` names the setting and its source around the message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from corral.model_routes import ModelRoute, parse_routes
from corral.netpolicy import parse_rule
from corral.vault.crypto import decode_key


class FullTracesUrl(str):
    """An OTLP traces URL given whole (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`): used as is."""

    __slots__ = ()


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_DB_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


def absolute_path(value: str | Path, base: Path) -> Path:
    """`value` with `~` expanded, made absolute against `base`, `..` folded."""
    return Path(os.path.normpath(base / Path(value).expanduser()))


def absolute_database(url: str, base: Path) -> str:
    """A PostgreSQL URL as is; `sqlite:///PATH` or a plain file path with the path absolute.

    Raises:
        ValueError: another scheme (it would otherwise become a SQLite file of that name).
    """
    if url.startswith("sqlite:///"):
        return "sqlite:///" + str(absolute_path(url.removeprefix("sqlite:///"), base))
    scheme = _DB_SCHEME.match(url)
    if scheme is None:
        return str(absolute_path(url, base))
    if scheme.group(1).lower() in ("postgresql", "postgres") and url[scheme.end() :][:2] == "//":
        return url
    if scheme.group(1).lower() == "sqlite":
        raise ValueError("must look like sqlite:///relative/path or sqlite:////absolute/path")
    raise ValueError(
        f"has scheme {scheme.group(1)!r}: use postgresql://…, sqlite:///path or a file path"
    )


def absolute_program(value: str, base: Path) -> str:
    """A program name as is (looked up on PATH); a path to one made absolute."""
    return str(absolute_path(value, base)) if "/" in value else value


def flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("0", "1"):
        return value == "1"
    raise ValueError(f"must be true or false (1 or 0 in the environment), got {value!r}")


def positive(value: float) -> float:
    if value <= 0:
        raise ValueError(f"must be positive, got {value}")
    return value


def port(value: int | None) -> int | None:
    if value is not None and not 0 < value < 65536:
        raise ValueError(f"must be a port number, got {value}")
    return value


def cwd_path(value: Path) -> Path:
    return absolute_path(value, Path.cwd())


def cwd_database(value: str | None) -> str | None:
    return absolute_database(value, Path.cwd()) if value else None


def cwd_program(value: str) -> str:
    if not value.strip():
        raise ValueError("must name a program")
    return absolute_program(value, Path.cwd())


def log_level(value: object) -> str:
    if not isinstance(value, str) or value.strip().upper() not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return value.strip().upper()


def vault_key(value: str | None) -> str | None:
    """Checked now, so a mistyped key is named at start and not at a session's first secret."""
    if value is None:
        return None
    entries = [e for e in (p.strip() for p in value.split(",")) if e]
    if not entries:
        raise ValueError("is empty")
    for number, entry in enumerate(entries, start=1):
        try:
            decode_key(entry)
        except ValueError as exc:  # the message never echoes the key
            raise ValueError(f"entry {number}: {exc}") from None
    return value


def keys(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValueError("must be a list of keys")
    if not all(isinstance(k, str) for k in value):
        raise ValueError("must be a list of strings")
    return tuple(k.strip() for k in value if k.strip())


def allow_private(entries: object) -> tuple[str, ...]:
    if not isinstance(entries, list | tuple) or not all(isinstance(e, str) for e in entries):
        raise ValueError("[egress] allow_private must be a list of strings")
    for entry in entries:
        parse_rule(entry)
    return tuple(e.strip() for e in entries if e.strip())


def uid_range(value: object) -> tuple[int, int]:
    """A uid range from "FIRST-LAST" or [FIRST, LAST]; raises ValueError naming the fault."""
    first: object = None
    last: object = None
    if isinstance(value, list | tuple) and len(value) == 2:
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


def routes(value: object) -> tuple[ModelRoute, ...]:
    if isinstance(value, tuple) and all(isinstance(r, ModelRoute) for r in value):
        return value
    return tuple(parse_routes({"routes": value}))


_SKILL_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z")


def anthropic_skills(table: object) -> dict[str, Path]:
    """`[skills.anthropic]` entries, each a directory holding a SKILL.md that sandboxes (their
    own uids) can read; raises ValueError naming the entry."""
    if not isinstance(table, Mapping):
        raise ValueError('[skills.anthropic] must be a table like xlsx = "/opt/skills/xlsx"')
    out: dict[str, Path] = {}
    for skill_id, raw in table.items():
        value = str(raw) if isinstance(raw, Path) else raw
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


def traces_url(value: str | None) -> str | None:
    """An OTLP/HTTP traces URL; a base URL gets `/v1/traces` as the OTLP spec says."""
    if value is None:
        return None
    url = value.strip()
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"must be an http(s) URL, got {url!r}")
    return url if isinstance(value, FullTracesUrl) else url.rstrip("/") + "/v1/traces"


def non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a non-empty string")
    return value.strip()


Flag = Annotated[bool, BeforeValidator(flag)]
Positive = AfterValidator(positive)
