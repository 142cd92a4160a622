"""Environment package layers: built once per spec in a sandbox, mounted read-only."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from corral.errors import HandsError
from corral.hands.base import Networking
from corral.hands.layers import LayerBuilder, PackageSpec, install_script, layer_env, layer_mount
from corral.hands.local import LocalHands
from tests.hands.conftest import make_recipe, needs_bwrap, needs_registry


def test_specs_are_canonical() -> None:
    a = PackageSpec.from_config({"pip": ["six==1.16.0", "attrs"], "npm": [], "apt": []})
    b = PackageSpec.from_config({"type": "packages", "pip": ["attrs", "six==1.16.0", "attrs"]})
    assert a == b and a.key == b.key and a.pip == ("attrs", "six==1.16.0")
    assert PackageSpec.from_config(None).empty
    assert PackageSpec(npm=("attrs",)).key != PackageSpec(pip=("attrs",)).key


@pytest.mark.parametrize("kind", ["apt", "cargo", "gem", "go"])
def test_other_package_managers_are_refused(kind: str) -> None:
    with pytest.raises(HandsError, match=f"{kind} packages are not supported") as info:
        PackageSpec.from_config({"pip": ["six"], kind: ["x"]})
    assert info.value.code == "packages_unsupported"


def test_package_strings_are_quoted_for_the_shell() -> None:
    script = install_script(PackageSpec(pip=("a; touch /tmp/pwned", "b>=1")))
    assert "'a; touch /tmp/pwned' 'b>=1'" in script


def builds_logged(builder: LayerBuilder, spec: PackageSpec) -> int:
    log = builder.paths(spec)[2]
    return log.read_text().count("== build of layer ") if log.exists() else 0


@pytest.mark.bwrap
@needs_bwrap
@needs_registry("pypi.org")
@pytest.mark.anyio
async def test_a_pip_layer_is_built_once_and_importable(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    spec = PackageSpec(pip=("six==1.16.0",))
    builder = LayerBuilder(local_hands, tmp_path / "layers")
    layers: list[Path] = []

    async def ensure() -> None:
        layers.append(await builder.ensure(spec))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(ensure)
    assert builder.builds == 1 and len(set(layers)) == 1
    other_process = LayerBuilder(local_hands, tmp_path / "layers")
    assert await other_process.ensure(spec) == layers[0] and other_process.builds == 0
    assert builds_logged(builder, spec) == 1
    # sealed: the server's, writable by no one else (the build ran as another uid), no setuid
    for path in (layers[0], *layers[0].rglob("*")):
        st = path.lstat()
        assert st.st_uid == os.geteuid(), path
        assert path.is_symlink() or not st.st_mode & 0o7022, path

    recipe = make_recipe(
        tmp_path,
        networking=Networking(type="none"),
        mounts=(layer_mount(layers[0]),),
        env=layer_env(),
    )
    sandbox = await local_hands.provision(recipe)
    out = await sandbox.execute(
        "bash", {"command": 'python3 -c "import six; print(six.__version__)"'}
    )
    assert (out.content[0]["text"], out.is_error) == ("1.16.0", False)
    out = await sandbox.execute("bash", {"command": "touch /opt/corral/layer/python/x"})
    assert out.is_error and "Read-only file system" in out.content[0]["text"]


@pytest.mark.bwrap
@needs_bwrap
@needs_registry("pypi.org")
@pytest.mark.anyio
async def test_a_failed_build_leaves_a_log_and_is_retried(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    spec = PackageSpec(pip=("corral-test-no-such-package-4c1f==0.0.1",))
    builder = LayerBuilder(local_hands, tmp_path / "layers")
    for attempt in (1, 2):
        with pytest.raises(HandsError, match="pip install failed") as info:
            await builder.ensure(spec)
        assert info.value.code == "package_install_failed" and info.value.retryable
        assert builder.builds == attempt and builds_logged(builder, spec) == attempt
    layer, marker, log = builder.paths(spec)
    assert not marker.exists()
    assert "No matching distribution found" in log.read_text()


@pytest.mark.bwrap
@needs_bwrap
@needs_registry("registry.npmjs.org")
@pytest.mark.anyio
async def test_an_npm_layer_is_usable_from_node(local_hands: LocalHands, tmp_path: Path) -> None:
    builder = LayerBuilder(local_hands, tmp_path / "layers")
    layer = await builder.ensure(PackageSpec(npm=("left-pad@1.3.0",)))
    recipe = make_recipe(tmp_path, mounts=(layer_mount(layer),), env=layer_env())
    sandbox = await local_hands.provision(recipe)
    command = "node -e \"console.log(require('left-pad')('7', 3, '0'))\""
    out = await sandbox.execute("bash", {"command": command})
    assert (out.content[0]["text"], out.is_error) == ("007", False)
