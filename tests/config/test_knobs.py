"""Reading knob files (autotune.config.knobs): the one place that opens them."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config.knobs import read_knob_file
from autotune.core.space import Space
from autotune.errors import ConfigError
from tests.fakes.landscape import KNOBS_YAML


def load_space(path: Path, *, max_batch_size: int, allow_extra_savers: bool) -> Space:
    """As the sweep reads a knob file: ``read_knob_file``, then ``Space.from_mapping``."""
    return Space.from_mapping(
        read_knob_file(path),
        source=str(path),
        max_batch_size=max_batch_size,
        allow_extra_savers=allow_extra_savers,
    )


def test_knob_file_loads_saving_to_hungry(tmp_path: Path) -> None:
    path = tmp_path / "knobs.yaml"
    path.write_text(KNOBS_YAML)
    s = load_space(path, max_batch_size=8, allow_extra_savers=False)
    assert s.names == ("quantization", "optimizer", "batch_size", "gradient_checkpointing")
    assert s.knob("quantization").values == ("int8-quanto", "none")
    assert s.knob("batch_size").values == (1, 2, 3, 4, 5, 6, 7, 8)  # every integer
    assert s.knob("gradient_checkpointing").values == (True, False)
    assert s.batch_knob == "batch_size"
    assert len(s) == 2 * 2 * 8 * 2 == len(list(s))
    assert s.fidelity == {"quantization": "none", "optimizer": "adamw"}


def test_missing_knob_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read knob file"):
        load_space(tmp_path / "nope.yaml", max_batch_size=4, allow_extra_savers=False)


def test_every_shipped_knob_file_loads() -> None:
    knob_dir = Path(__file__).resolve().parents[2] / "configs" / "knobs"
    files = sorted(knob_dir.glob("*.yaml"))
    assert files, f"no knob files under {knob_dir}"
    for path in files:
        for extra in (False, True):
            s = load_space(path, max_batch_size=16, allow_extra_savers=extra)
            assert len(list(s)) == len(s) > 0, path
            assert s.families(), path
