"""A misspelt event field is an error at type check and at run time (issue 20): before, an
`agent.tool_use` built with `evaluated_permision="ask"` was stored and read back as
`evaluated_permission='allow'`, so one typo let an `always_ask` tool run without asking."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from mypy import api as mypy_api

from corral.brain import events as ev
from corral.brain.event_builder_gen import render
from corral.wire.events import AgentToolUseEvent, parse_event

ROOT = Path(__file__).resolve().parents[2]
MISSPELT = textwrap.dedent(
    """
    from corral.brain import events as ev

    ev.event("agent.tool_use", name="bash", input={}, evaluated_permision="ask")
    """
)


def test_a_misspelt_field_is_refused_at_run_time() -> None:
    with pytest.raises(ev.UnknownEventField, match="evaluated_permision"):
        ev.event("agent.tool_use", name="bash", input={}, evaluated_permision="ask")  # type: ignore[call-overload]


def typecheck(snippet: Path) -> tuple[str, int]:
    """mypy --strict on one file, with this checkout's sources on its path."""
    out, _, status = mypy_api.run(
        ["--strict", "--follow-imports=silent", "--cache-dir=/dev/null", str(snippet)]
    )
    return out, status


@pytest.fixture(autouse=True)
def sources_on_mypy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MYPYPATH", str(ROOT / "src"))


def test_a_misspelt_field_is_a_type_error(tmp_path: Path) -> None:
    snippet = tmp_path / "misspelt.py"
    snippet.write_text(MISSPELT)
    out, status = typecheck(snippet)
    assert status == 1, out
    assert 'No overload variant of "event" matches' in out, out
    snippet.write_text(MISSPELT.replace("permision", "permission"))
    out, status = typecheck(snippet)
    assert status == 0, out


def test_a_wrong_value_type_is_a_type_error(tmp_path: Path) -> None:
    snippet = tmp_path / "wrong.py"
    snippet.write_text(
        MISSPELT.replace('evaluated_permision="ask"', 'evaluated_permission="maybe"')
    )
    out, _, status = mypy_api.run(["--strict", "--follow-imports=silent", str(snippet)])
    assert status == 1, out


def test_every_field_the_builder_accepts_reads_back() -> None:
    body = ev.event(
        "agent.tool_use",
        name="bash",
        input={"command": "ls"},
        evaluated_permission="ask",
        evaluation={"type": "always_ask"},
    )
    read = parse_event(body)
    assert isinstance(read, AgentToolUseEvent)
    assert read.evaluated_permission == "ask"
    assert read.evaluation is not None and read.evaluation.type == "always_ask"


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (ROOT / ".venv/bin/ruff").exists(), reason="no ruff"
)
def test_the_generated_builder_is_not_stale() -> None:
    ruff = shutil.which("ruff") or str(ROOT / ".venv/bin/ruff")
    formatted = subprocess.run(
        [ruff, "format", "--stdin-filename", "src/corral/brain/event_builder.py", "-"],
        input=render(),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    committed = (ROOT / "src" / "corral" / "brain" / "event_builder.py").read_text()
    assert committed == formatted, (
        "src/corral/brain/event_builder.py is stale: uv run python -m "
        "corral.brain.event_builder_gen > src/corral/brain/event_builder.py && "
        "uv run ruff format src/corral/brain/event_builder.py"
    )
