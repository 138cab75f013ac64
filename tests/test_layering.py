"""The packages of ``autotune/`` form layers: each imports only ``errors`` and the layers below it.

Why: a cycle between packages (the core reading config files, the GPU package killing processes)
is how a pure core and a thin CLI rot. The order is docs/architecture.md's.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import REPO

#: Lowest first. A module at the top of ``autotune/`` is its own layer (``errors``, ``cli``...).
LAYERS = [
    "errors",
    "core",
    "config",
    "gpu",
    "execution",
    "store",
    "trainers",
    "plan",
    "report",
    "sweep",
    "cli",
]


def layer_of(path: Path) -> str:
    parts = path.relative_to(REPO / "autotune").parts
    return parts[0] if len(parts) > 1 else path.stem


def upward_imports(own: str, source: str) -> list[str]:
    """The ``autotune.X`` modules that code of layer ``own`` imports from a layer above it."""
    if own not in LAYERS:
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "autotune":
                names += [f"autotune.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] != "autotune" or len(parts) < 2 or parts[1] not in LAYERS:
                continue
            if LAYERS.index(parts[1]) > LAYERS.index(own):
                found.append(name)
    return found


def test_every_package_is_a_known_layer() -> None:
    packages = {p.name for p in (REPO / "autotune").iterdir() if (p / "__init__.py").is_file()}
    assert packages <= set(LAYERS), sorted(packages - set(LAYERS))


def test_no_package_imports_a_layer_above_it() -> None:
    offenders = {}
    for f in sorted((REPO / "autotune").rglob("*.py")):
        up = upward_imports(layer_of(f), f.read_text(encoding="utf-8"))
        if up:
            offenders[str(f.relative_to(REPO))] = up
    assert offenders == {}


@pytest.mark.parametrize(
    ("own", "source", "expected"),
    [
        ("core", "from autotune.config.yamlconf import load_yaml\n", ["autotune.config.yamlconf"]),
        ("core", "def f():\n    import autotune.sweep.api\n", ["autotune.sweep.api"]),
        ("gpu", "from autotune import report\n", ["autotune.report"]),
        ("gpu", "from autotune.execution.proctree import kill_tree\n", ["autotune.execution.proctree"]),
        ("sweep", "from autotune.core.verdict import fits\nfrom autotune.errors import X\n", []),
        ("core", "from . import y\nimport os\nfrom autotune.core.units import gb\n", []),
    ],
)
def test_the_checker_sees_upward_imports(own: str, source: str, expected: list[str]) -> None:
    assert upward_imports(own, source) == expected
