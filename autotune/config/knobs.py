"""Reading knob files (``configs/knobs/<trainer>.yaml``): the one place that opens them.

Why here and not in ``autotune.core.space``: the core does no I/O. This module reads
the file (safe YAML loader, errors naming the file) and hands the mapping to
``Space.from_mapping``, which alone interprets it; the sweep, the report and
``autotune status`` all come through here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.core.space import ParamValue, Space
from autotune.core.yamltext import load_yaml
from autotune.errors import AutotuneError, ConfigError

#: Preferred values for near-ties when the trainer's knob file names none (or cannot be read).
DEFAULT_FIDELITY: dict[str, Any] = {"quantization": "none", "optimizer": "adamw"}
#: Big enough for every ``type: int`` knob when only the fidelity of a file is wanted.
_ANY_BATCH = 1 << 20


def knob_path(name: str) -> Path:
    """The shipped knob file ``name`` (an adapter's ``knob_file``, like ``ltx2.yaml``); an absolute
    path is taken as it is (a trainer that ships outside autotune keeps its knob file beside it)."""
    from configs import config_file

    path = Path(name) if Path(name).is_absolute() else Path(str(config_file("knobs", name)))
    if not path.is_file():
        raise ConfigError(f"the knob file {path} is missing; reinstall autotune")
    return path


def read_knob_file(path: Path | str) -> Any:
    """The parsed knob file (safe loader); an unreadable file is a ``ConfigError`` naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read knob file {path}: {exc.strerror or exc}") from None
    return load_yaml(text, str(path))


def load_space(path: Path | str, *, max_batch_size: int, allow_extra_savers: bool) -> Space:
    """The ``Space`` of knob file ``path``; errors name the file and the knob."""
    return Space.from_mapping(
        read_knob_file(path),
        source=str(path),
        max_batch_size=max_batch_size,
        allow_extra_savers=allow_extra_savers,
    )


def trainer_fidelity(trainer: str, knobs: Sequence[str] | None = None) -> dict[str, ParamValue]:
    """The preferred values of ``trainer``'s shipped knob file, only for ``knobs`` when given
    (the knobs the sweep had: a knob the trainer never received breaks no tie).

    The report and ``autotune status`` judge near-ties with it; a trainer without a
    (valid) knob file, or one that names no ``fidelity``, gets ``DEFAULT_FIDELITY``.
    """
    fidelity: dict[str, ParamValue] = dict(DEFAULT_FIDELITY)
    try:
        path = knob_path(f"{trainer}.yaml")
        data = read_knob_file(path)
        if isinstance(data, Mapping) and isinstance(data.get("fidelity"), Mapping):
            space = Space.from_mapping(
                data, source=str(path), max_batch_size=_ANY_BATCH, allow_extra_savers=True
            )
            fidelity = dict(space.fidelity)
    except AutotuneError:
        pass
    return {k: v for k, v in fidelity.items() if knobs is None or k in knobs}
