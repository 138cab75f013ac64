"""The layout's two rules, checked on the source: the parent side never imports torch,
the child side never imports the orchestrator (DESIGN.md, "Layout")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("autotune", {"torch", "bitsandbytes", "optimum", "accelerate", "trials"}),
        ("trials", {"autotune"}),
    ],
)
def test_package_never_imports(package: str, forbidden: set[str]) -> None:
    files = sorted((REPO / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    offenders = {
        str(f.relative_to(REPO)): sorted(imported_roots(f) & forbidden)
        for f in files
        if imported_roots(f) & forbidden
    }
    assert offenders == {}


def test_the_checker_sees_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("import torch.nn as nn\nfrom autotune.errors import X\nfrom . import y\n")
    assert imported_roots(src) == {"torch", "autotune"}
