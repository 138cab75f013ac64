"""The layering, checked on the source (docs/architecture.md):

- the parent side (``autotune/``) never imports torch, the child side (``trials/``) never imports
  the orchestrator;
- the core (``autotune/core/``) does no I/O: no I/O modules, no file calls, and from the rest of
  the package only ``autotune.core`` and ``autotune.errors``;
- building the command line's parser imports no Optuna, database or driver module, so
  ``autotune --help`` answers at once.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, cli_env

CORE = REPO / "autotune" / "core"

#: Modules the core must not import: processes, files, sockets, databases, the GPU driver, the store.
CORE_FORBIDDEN_MODULES = {
    "os",
    "io",
    "subprocess",
    "sqlite3",
    "socket",
    "shutil",
    "tempfile",
    "glob",
    "fcntl",
    "multiprocessing",
    "urllib",
    "http",
    "psutil",
    "pynvml",
    "optuna",
    "sqlalchemy",
    "psycopg2",
}
#: What the core may import from the rest of the package.
CORE_ALLOWED_INTERNAL = ("autotune.core", "autotune.errors")
#: Calls that touch the file system: ``open(...)`` and pathlib's I/O methods.
IO_CALLS = {
    "open",
    "read_text",
    "write_text",
    "read_bytes",
    "write_bytes",
    "mkdir",
    "unlink",
    "touch",
    "rmdir",
    "iterdir",
    "glob",
    "rglob",
    "exists",
    "is_file",
    "is_dir",
    "stat",
}
#: Known exceptions, each with the change that removes it. Keep this empty otherwise.
#: ("autotune/core/x.py": {"import:os", "call:open"}); test_core_allowances_are_still_needed
#: fails on one that is no longer used.
CORE_ALLOWED: dict[str, set[str]] = {}

#: Modules that building the parser (``autotune --help``) must not load.
HEAVY = (
    "optuna",
    "sqlalchemy",
    "sqlite3",
    "psycopg2",
    "pynvml",
    "psutil",
    "torch",
    "numpy",
    "ruamel",
    "yaml",
)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def imported_modules(path: Path) -> set[str]:
    """Every absolute module imported anywhere in the file (inside functions too)."""
    names = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def imported_roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in imported_modules(path)}


def io_calls(path: Path) -> set[str]:
    """Names of file-system calls: ``open(...)``, ``x.open(...)``, ``p.read_text()`` and the like."""
    found = set()
    for node in ast.walk(_tree(path)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            found.add("open")
        elif isinstance(func, ast.Attribute) and func.attr in IO_CALLS:
            found.add(func.attr)
    return found


def core_violations(path: Path) -> set[str]:
    modules = imported_modules(path)
    out = {f"import:{m}" for m in modules if m.split(".")[0] in CORE_FORBIDDEN_MODULES}
    out |= {
        f"import:{m}"
        for m in modules
        if m.split(".")[0] == "autotune"
        and not any(m == a or m.startswith(a + ".") for a in CORE_ALLOWED_INTERNAL)
    }
    out |= {f"call:{c}" for c in io_calls(path)}
    return out


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


def test_the_core_does_no_io() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert len(files) >= 6, f"the core is missing modules: {files}"
    offenders = {}
    for f in files:
        rel = str(f.relative_to(REPO))
        bad = core_violations(f) - CORE_ALLOWED.get(rel, set())
        if bad:
            offenders[rel] = sorted(bad)
    assert offenders == {}


def test_core_allowances_are_still_needed() -> None:
    """An allowance that nothing uses any more is deleted, so it cannot hide a new violation."""
    stale = {
        rel: sorted(allowed - core_violations(REPO / rel))
        for rel, allowed in CORE_ALLOWED.items()
        if not (REPO / rel).is_file() or allowed - core_violations(REPO / rel)
    }
    assert stale == {}


def test_the_checkers_see_imports_and_io(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import torch.nn as nn\nfrom autotune.errors import X\nfrom . import y\n"
        "def f(p):\n    import os.path\n    from autotune.store import study\n"
        "    with open(p) as fh, p.open() as g:\n        return p.read_text() + str(len(fh.read()))\n"
    )
    assert imported_roots(src) == {"torch", "autotune", "os"}
    assert io_calls(src) == {"open", "read_text"}
    assert core_violations(src) == {"import:os.path", "import:autotune.store", "call:open", "call:read_text"}


def test_building_the_cli_imports_nothing_heavy() -> None:
    """``autotune --help`` (every subcommand's too) loads no Optuna, database, driver or YAML module:
    those load inside the command that needs them."""
    code = (
        "import contextlib, io, json, sys\n"
        "from autotune import cli\n"
        "parser = cli.build_parser()\n"
        "for argv in (['--help'], ['probe', '--help'], ['plan', '--help'], ['sweep', '--help'],\n"
        "             ['worker', '--help'], ['status', '--help'], ['report', '--help']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
        "        cli.build_parser().parse_args(argv)\n"
        "    assert 'usage: autotune' in out.getvalue(), argv\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = cli_env()
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert "autotune.cli" in loaded
    assert sorted(m for m in loaded if m.split(".")[0] in HEAVY) == []
