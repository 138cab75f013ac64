"""The exception family: one root, exit codes by kind, and a refused candidate kept apart from a bad config."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from autotune import errors
from autotune.errors import AutotuneError, CandidateRefused, ConfigError, UsageError
from autotune.trainers import get_adapter


def _exception_classes() -> list[type[BaseException]]:
    return [
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == errors.__name__
    ]


def test_every_exception_has_the_one_root() -> None:
    classes = _exception_classes()
    assert len(classes) >= 15
    assert all(issubclass(c, AutotuneError) for c in classes)


def test_a_refusal_is_not_a_config_error() -> None:
    refused = CandidateRefused("batch_size 4 needs 4 samples, the data holds 3")
    assert not isinstance(refused, ConfigError)
    assert not isinstance(refused, UsageError)
    assert isinstance(refused, AutotuneError) and refused.exit_code == 2


def test_a_bad_config_is_not_a_refusal() -> None:
    bad = ConfigError("unknown key 'optimisation'")
    assert not isinstance(bad, CandidateRefused) and bad.exit_code == 2


def test_the_ltx2_adapter_refuses_with_a_refusal_and_rejects_bad_params_with_config_errors(
    tmp_path: Path,
) -> None:
    adapter = get_adapter("ltx2", trainer_dir=tmp_path)
    full = adapter.baseline_from_text("model:\n  training_mode: full\n")  # type: ignore[attr-defined]
    with pytest.raises(CandidateRefused) as refused:
        adapter.final_config(full, {"quantization": "int8-quanto"}, gradient_accumulation_steps=1)
    assert not isinstance(refused.value, ConfigError)
    with pytest.raises(ConfigError) as bad:
        adapter.final_config(full, {"optimizer": "sgd"}, gradient_accumulation_steps=1)
    assert not isinstance(bad.value, CandidateRefused)


def test_no_exception_class_outside_errors_py() -> None:
    """Every exception autotune defines lives in ``errors.py`` (the report's two are moved separately)."""
    root = Path(errors.__file__).parent
    allowed = {"report/build.py": {"StudyNotFoundError", "ReportError"}}
    names = {c.__name__ for c in _exception_classes()}
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ClassDef)
                and node.name not in allowed.get(rel, set())
                and any(
                    isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id in names)
                    for b in node.bases
                )
            ):
                found.setdefault(rel, set()).add(node.name)
    assert found == {}
