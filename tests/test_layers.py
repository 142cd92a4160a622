"""Dependencies point one way (api -> brain -> session/hands/models); pinned by reading imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "corral"

# package -> corral packages it must never import
FORBIDDEN = {
    "wire": {"api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli"},
    "session": {
        "api", "brain", "service", "models", "hands", "runtime", "cli", "demo", "netpolicy",
        "outbound",
    },
    "store": {
        "api", "brain", "service", "models", "hands", "runtime", "cli", "demo", "netpolicy",
        "outbound",
    },
    "brain": {"api", "cli", "runtime", "store.sqlite", "store.postgres", "hands.local", "demo"},
    "models": {"api", "brain", "service", "session", "store", "hands", "runtime", "cli", "demo"},
    "hands": {"api", "brain", "service", "session", "store", "models", "runtime", "cli"},
    "service": {"api", "cli", "runtime", "store.sqlite", "store.postgres", "hands.local"},
    "demo": {"api", "brain", "service", "session", "store", "hands", "runtime"},
    "vault": {
        "api", "brain", "service", "session", "hands", "models", "runtime", "cli", "demo",
        "store.sqlite", "store.postgres",
    },
    "files": {"api", "brain", "hands", "models", "runtime", "cli", "demo"},
    "mcp": {
        "api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli",
        "demo", "files",
    },
    "console": {
        "api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli",
        "demo", "files", "tools", "vault", "mcp", "wire", "config",
    },
    "tools": {
        "api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli",
        "demo", "files",
    },
    "config.py": {
        "api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli",
        "demo", "files", "tools",
    },
    "netpolicy.py": {
        "api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli",
        "demo", "files", "tools", "config",
    },
    "outbound.py": {
        "api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli",
        "demo", "files", "tools", "config", "vault",
    },
    "model_routes.py": {
        "api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli",
        "demo", "files", "tools",
    },
    "pricing.py": {
        "api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli",
        "demo", "files", "tools", "config", "vault", "wire",
    },
    "observability": {
        "api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli",
        "demo", "files", "tools", "config", "vault", "wire", "mcp", "netpolicy", "outbound",
        "pricing", "ids", "errors",
    },
    "context_window.py": {
        "api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli",
        "demo", "files", "tools", "config", "vault", "wire", "pricing", "model_routes",
    },
    "web_search_config.py": {
        "api", "brain", "service", "session", "store", "hands", "models", "runtime", "cli",
        "demo", "files", "tools", "config", "outbound", "netpolicy",
    },
    "selfhosted": {
        "api", "runtime", "store", "session", "models", "demo", "vault", "cli", "mcp",
    },
}  # fmt: skip

# package -> for a corral package it may use only in part, the only modules it may import
ONLY = {
    # `corral hands` talks to the server over HTTP: of the server side it may use the sandbox
    # skill-archive reader (the sandbox pool is in hands), nothing that reads or writes the store.
    "selfhosted": {"brain": set(), "service": {"service.skill_bundle"}},
}


def corral_imports(path: Path) -> set[str]:
    """Dotted corral submodules imported by a file (without the `corral.` prefix)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        found.update(n.removeprefix("corral.") for n in names if n.startswith("corral."))
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_dependency_direction(package: str) -> None:
    bad = []
    root = SRC / package
    for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
        if package == "demo" and path.name == "embedded.py":
            continue  # the demo's embedded server is a composition root, like the CLI
        for imported in corral_imports(path):
            if any(imported == f or imported.startswith(f + ".") for f in FORBIDDEN[package]):
                bad.append(f"{path.relative_to(SRC)} imports corral.{imported}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", sorted(ONLY))
def test_package_uses_only_the_allowed_parts(package: str) -> None:
    bad = []
    for path in sorted((SRC / package).rglob("*.py")):
        for imported in corral_imports(path):
            for part, allowed in ONLY[package].items():
                inside = imported == part or imported.startswith(part + ".")
                if inside and imported not in allowed:
                    bad.append(f"{path.relative_to(SRC)} imports corral.{imported}")
    assert not bad, "\n".join(bad)
