"""Where a plan's config comes from, and the paths patched into it.

The tier's baseline is read from the user's trainer checkout (``--trainer-dir``), or
from autotune's own ``configs/`` for a trainer whose baselines ship with it
(``TrainerAdapter.traits.bundled_baselines``), or from a YAML file named with ``--config``.
The four paths (model, text encoder, preprocessed data, output dir) are made
absolute and checked before anything is written: a sweep should not find out an
hour in that the data folder was mistyped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from autotune.config.yamlconf import RoundTripConfig
from autotune.errors import AutotuneError, UsageError
from autotune.gpu.tiers import TierInfo
from autotune.trainers import TrainerAdapter
from autotune.trainers.ltx2.data import data_sources

#: Where the LTX-2 trainer package sits inside the LTX-2 repository.
LTX2_PACKAGE = Path("packages") / "ltx-trainer"

PATH_KEYS = {
    "model": "model.model_path",
    "text_encoder": "model.text_encoder_path",
    "data": "data.preprocessed_data_root",
    "output_dir": "output_dir",
}
_FLAGS = {
    "model": "--model",
    "text_encoder": "--text-encoder",
    "data": "--data",
    "output_dir": "--output-dir",
}
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^hf:")


@dataclass
class PatchedPaths:
    """What ``patch_paths`` changed (dotted key -> new value, in order), left as shipped, and warns of."""

    patched: dict[str, str] = field(default_factory=dict)
    unset: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def locate_config(
    adapter: type[TrainerAdapter],
    trainer_dir: Path | None,
    config: str | None,
    tier: TierInfo,
    cwd: Path,
    warnings: list[str],
) -> tuple[Path | None, Path | None]:
    """(trainer package dir, config file to read); (None, None) when no checkout is given."""
    trainer = adapter.name
    if (
        config
        and Path(config).suffix in (".yaml", ".yml")
        and ("/" in config or abs_path(Path(config), cwd).is_file())
    ):
        path = abs_path(Path(config), cwd)
        if path.is_dir():
            raise UsageError(f"--config {config}: {path} is a directory; give the YAML file itself")
        if not path.is_file():
            raise UsageError(
                f"--config {config}: no such file ({path}); check the path, or name a shipped config "
                "without a folder (like --config t2v_lora)"
            )
        reads_checkout = adapter.traits.bundled_baselines is None
        package = package_dir(trainer_dir, cwd) if reads_checkout and trainer_dir else None
        return package, path
    if adapter.traits.bundled_baselines is not None:
        return None, _bundled(adapter, trainer_dir, config, tier, warnings)
    if trainer_dir is None:
        warnings.append(
            "no LTX-2 checkout given: this plan names the tier and its baseline only; add --trainer-dir DIR "
            "(the LTX-2 repo root or packages/ltx-trainer) to read the config, patch its paths and write it"
        )
        return None, None
    package = package_dir(trainer_dir, cwd)
    configs = package / "configs"
    name = yaml_name(config) if config else tier.baseline_file(trainer)
    path = configs / name
    if not path.is_file():
        shipped = sorted(p.name for p in configs.glob("*.yaml"))
        raise UsageError(
            f"{path}: no such config in the trainer checkout; shipped configs: {', '.join(shipped) or '(none)'}. "
            "Name one with --config NAME, or update the checkout."
        )
    if config and name != tier.baseline_file(trainer):
        warnings.append(
            f"--config {name} replaces the {tier.tier} tier's tested baseline ({tier.baseline_file(trainer)}); "
            "check that it fits the card"
        )
    return package, path


def _bundled(
    adapter: type[TrainerAdapter],
    trainer_dir: Path | None,
    config: str | None,
    tier: TierInfo,
    warnings: list[str],
) -> Path:
    """The baseline that ships with autotune under ``configs/<bundled_baselines>/``."""
    from configs import config_file

    trainer, folder = adapter.name, adapter.traits.bundled_baselines
    if trainer_dir is not None:
        warnings.append(f"--trainer-dir is ignored for the built-in {trainer} trainer")
    name = yaml_name(config) if config else tier.baseline_file(trainer)
    if config and "/" not in name:
        name = f"{folder}/{name}"
    node = config_file(*name.split("/"))
    path = Path(str(node))
    if not path.is_file():
        shipped = sorted(p.name for p in path.parent.glob("*.yaml")) if path.parent.is_dir() else []
        raise AutotuneError(
            f"{adapter.traits.label}'s baseline configs/{name} is not in this installation"
            + (f" (it has: {', '.join(shipped)})" if shipped else f" (configs/{folder}/ is missing)")
            + f"; it ships with the built-in {trainer} trainer: update autotune, or plan with --trainer ltx2"
        )
    return path


def package_dir(trainer_dir: Path | None, cwd: Path) -> Path:
    """The trainer package inside ``--trainer-dir`` (the repo root or ``packages/ltx-trainer``)."""
    assert trainer_dir is not None
    root = abs_path(trainer_dir, cwd)
    if not root.exists():
        raise UsageError(
            f"--trainer-dir {trainer_dir}: no such directory ({root}); give the LTX-2 repo root "
            "(git clone https://github.com/Lightricks/LTX-2) or its packages/ltx-trainer"
        )
    if not root.is_dir():
        raise UsageError(f"--trainer-dir {trainer_dir}: {root} is a file, not the LTX-2 checkout's directory")
    for candidate in (root / LTX2_PACKAGE, root):
        if (candidate / "configs").is_dir() and (
            (candidate / "scripts" / "train.py").is_file()
            or any((candidate / "configs").glob("t2v_lora*.yaml"))
        ):
            return candidate
    raise UsageError(
        f"--trainer-dir {trainer_dir}: {root} is not an LTX-2 checkout: expected {LTX2_PACKAGE}/configs/ "
        "(the repo root) or configs/ with t2v_lora.yaml (packages/ltx-trainer)"
    )


def patch_paths(
    rt: RoundTripConfig,
    given: Mapping[str, str | Path | None],
    cwd: Path,
    *,
    package: Path | None,
    loads_model_paths: bool,
) -> PatchedPaths:
    """Set each given path (absolute, checked) in ``rt``; an unset relative ``output_dir`` is made
    absolute from the package, and paths the trainer loads but nobody gave are named."""
    out = PatchedPaths()
    for name, dotted in PATH_KEYS.items():
        value = given[name]
        if value is None:
            if name == "output_dir":
                _default_output_dir(rt, package, out)
            elif loads_model_paths and rt.has(dotted):
                out.unset.append(dotted)
                out.warnings.append(
                    f"{dotted} still reads {rt.get(dotted)!r} from the shipped file: pass {_FLAGS[name]} PATH "
                    "before a sweep or training can start"
                )
            continue
        text = str(value)
        if _URL.match(text):
            raise UsageError(
                f"{_FLAGS[name]} {text}: a URL; the LTX-2 trainer loads local files only. "
                "Download it first and pass the local path."
            )
        path = abs_path(Path(value), cwd)
        _check_path(name, path, rt)
        rt.set(dotted, str(path))
        out.patched[dotted] = str(path)
    return out


def _default_output_dir(rt: RoundTripConfig, package: Path | None, out: PatchedPaths) -> None:
    """A relative shipped ``output_dir`` is relative to the trainer package: make it absolute."""
    current = rt.get("output_dir")
    if package is not None and isinstance(current, str) and current and not Path(current).is_absolute():
        absolute = str((package / current).resolve())
        rt.set("output_dir", absolute)
        out.patched["output_dir"] = absolute


def _check_path(name: str, path: Path, rt: RoundTripConfig) -> None:
    flag = _FLAGS[name]
    if name == "model":
        if not path.exists():
            raise UsageError(f"{flag} {path}: no such file; give the local LTX-2 checkpoint (.safetensors)")
        if not path.is_file() or path.suffix != ".safetensors":
            raise UsageError(
                f"{flag} {path}: the model must be a local .safetensors file (the unified checkpoint, "
                "or a split pack's transformer)"
            )
    elif name == "text_encoder":
        if not path.exists():
            raise UsageError(
                f"{flag} {path}: no such file or directory; give the Gemma text encoder's directory "
                "(or a split pack's text-encoder .safetensors)"
            )
        if path.is_file() and path.suffix != ".safetensors":
            raise UsageError(
                f"{flag} {path}: expected the Gemma model directory or a packed text-encoder .safetensors"
            )
    elif name == "data":
        if not path.is_dir():
            raise UsageError(
                f"{flag} {path}: no such directory; give the output folder of the trainer's "
                "scripts/process_dataset.py (with latents/ and conditions/)"
            )
        missing = [d for d in _data_dirs(rt) if not (path / d).is_dir()]
        if missing:
            raise UsageError(
                f"{flag} {path}: missing {', '.join(d + '/' for d in missing)}, which the config's "
                "training_strategy reads; preprocess the dataset for this config (scripts/process_dataset.py) "
                "or point --data at its output"
            )
    elif name == "output_dir" and path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path}: a file is in the way; the trainer needs a directory there")


def _data_dirs(rt: RoundTripConfig) -> list[str]:
    """The subfolders of the preprocessed data that the config's training strategy reads."""
    strategy = rt.get("training_strategy")
    return data_sources({"training_strategy": strategy} if strategy is not None else {})


def abs_path(path: Path, cwd: Path) -> Path:
    p = path.expanduser()
    return (p if p.is_absolute() else cwd / p).resolve()


def yaml_name(name: str) -> str:
    return name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
