"""diffusion-pipe's config checked: the keys the trainer reads without a default, a candidate's
knob values, the block swap it would assert on, the optimizer's spelling, and where its checkout
is (the facts and their file:line are in ``autotune.trainers.dpipe.adapter``'s docstring)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.config.tomledit import TomlConfig
from autotune.errors import CandidateRefused, ConfigError, UsageError
from autotune.trainers.dpipe.models import CHECKPOINTING, DTYPES

KNOB_KEYS: dict[str, str] = {
    "blocks_to_swap": "blocks_to_swap",
    "transformer_dtype": "model.transformer_dtype",
    "activation_checkpointing": "activation_checkpointing",
    "optimizer": "optimizer.type",
    "batch_size": "micro_batch_size_per_gpu",
}
GRAD_ACCUM_KEY = "gradient_accumulation_steps"


def check_config(data: Mapping[str, Any], source: str) -> None:
    """A parsed config refused now, by name, where the trainer would fail on it later."""
    batch = data.get(KNOB_KEYS["batch_size"], 1)
    if isinstance(batch, list):  # train.py:399-400: per-resolution batch sizes
        raise ConfigError(
            f"{source}: micro_batch_size_per_gpu is a per-resolution list ({batch!r}); autotune sweeps "
            "one batch size: set micro_batch_size_per_gpu = N (the trials train the largest "
            "resolution only) and run again"
        )
    if not isinstance(data.get("model"), dict) or not isinstance(data.get("optimizer"), dict):
        raise ConfigError(
            f"{source}: not a diffusion-pipe config: it needs a [model] and an [optimizer] table "
            "(see examples/main_example.toml in the diffusion-pipe checkout)"
        )
    # The trainer reads these without a default (train.py:107, 310, 655): name them now.
    for table, key, example in (
        ("model", "type", "'wan'"),
        ("model", "dtype", "'bfloat16'"),
        ("optimizer", "type", "'adamw_optimi'"),
    ):
        if not isinstance(data[table].get(key), str):
            raise ConfigError(
                f"{source}: [{table}] has no {key} (like {key} = {example}); diffusion-pipe needs one"
            )


def check_knob_values(merged: Mapping[str, Any]) -> None:
    """A candidate's merged knob values, each the kind the trainer reads."""
    if merged["transformer_dtype"] not in DTYPES:
        raise ConfigError(
            f"transformer_dtype {merged['transformer_dtype']!r} is not one diffusion-pipe maps "
            f"(utils/common.py DTYPE_MAP: {', '.join(DTYPES)})"
        )
    if merged["activation_checkpointing"] not in CHECKPOINTING or (
        isinstance(merged["activation_checkpointing"], int)
        and not isinstance(merged["activation_checkpointing"], bool)
    ):
        raise ConfigError(
            f"activation_checkpointing must be true, false or 'unsloth'; got {merged['activation_checkpointing']!r}"
        )
    if not isinstance(merged["optimizer"], str) or not merged["optimizer"]:
        raise ConfigError(
            f"the [optimizer] type must be a name like 'adamw_optimi'; got {merged['optimizer']!r}"
        )
    swap = merged["blocks_to_swap"]
    if isinstance(swap, bool) or not isinstance(swap, int) or swap < 0:
        raise ConfigError(f"blocks_to_swap must be a whole number >= 0; got {swap!r}")


def check_swap(data: Mapping[str, Any], swap: int, limit: int | None) -> None:
    """Refuse a block swap the trainer would assert on: without a LoRA, with pipeline stages, past the model's most."""
    if "adapter" not in data:
        raise CandidateRefused(
            f"blocks_to_swap {swap}: diffusion-pipe swaps blocks only when training a LoRA "
            "(train.py:578 asserts an [adapter] table)"
        )
    if data.get("pipeline_stages", 1) != 1:
        raise CandidateRefused(
            f"blocks_to_swap {swap}: diffusion-pipe swaps blocks only with pipeline_stages = 1 (train.py:577)"
        )
    if limit is not None and swap > limit:
        raise CandidateRefused(
            f"blocks_to_swap {swap}: this model swaps at most {limit} blocks (its block count less 2; "
            "the trainer asserts it in enable_block_swap)"
        )


def optimizer_spelling(data: Mapping[str, Any], value: str) -> str:
    """The config's own spelling when it names the same optimizer (train.py:656 lowercases it)."""
    own = (data.get("optimizer") or {}).get("type")
    return own if isinstance(own, str) and own.lower() == value.lower() else value


def find_checkout(trainer_dir: Path | None, config_path: Path | None) -> Path:
    """The diffusion-pipe checkout (holding ``train.py``): ``--trainer-dir``, else above the config or here."""
    if trainer_dir is not None:
        root = trainer_dir.expanduser().resolve()
        if not (root / "train.py").is_file():
            raise UsageError(
                f"--trainer-dir {trainer_dir}: no train.py in {root}; give the diffusion-pipe checkout"
            )
        return root
    hints = [*(Path(config_path).resolve().parents if config_path else []), Path.cwd()]
    for hint in hints:
        if (hint / "train.py").is_file() and (hint / "utils" / "dataset.py").is_file():
            return hint
    raise UsageError(
        "cannot find the diffusion-pipe checkout (a folder with train.py and utils/dataset.py) "
        "above the config or here; pass --trainer-dir DIR"
    )


def table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name)
    return value if isinstance(value, Mapping) else {}


def knob_spelling(value: Any) -> Any:
    """An optimizer type as the knob file spells it (the trainer matches it case-insensitively)."""
    if not isinstance(value, str):
        return value
    for known in ("AdamW8bitKahan", "adamw_optimi", "adamw8bit", "adamw"):
        if value.lower() == known.lower():
            return known
    return value


def read_dataset(data: Mapping[str, Any], source: str, cwd: Path) -> TomlConfig:
    """The dataset TOML the config's ``dataset`` names (train.py:393: a relative path from ``cwd``)."""
    dataset = data.get("dataset")
    if not isinstance(dataset, str) or not dataset:
        raise ConfigError(f"{source}: no `dataset = 'path/to/dataset.toml'` (train.py:393 reads it)")
    path = Path(dataset).expanduser()
    path = path if path.is_absolute() else cwd / path
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{source}: dataset = {dataset!r}: cannot read {path} "
            f"({exc.strerror or exc}); a relative path is read from the diffusion-pipe checkout {cwd}"
        ) from None
    return TomlConfig(text, str(path))


#: The optimizer families the knob turns within, each 8-bit states first, then its full AdamW
#: (train.py:668-687): optimi's AdamW8bitKahan (optimizers/adamw_8bit.py) and optimi.AdamW;
#: bitsandbytes' AdamW8bit and torch's AdamW.
OPTIMIZER_FAMILIES: tuple[tuple[str, ...], ...] = (("AdamW8bitKahan", "adamw_optimi"), ("adamw8bit", "adamw"))


def optimizer_family(value: Any) -> tuple[str, ...] | None:
    """The family of an optimizer type as the knob file spells it, or ``None``."""
    return next((f for f in OPTIMIZER_FAMILIES if value in f), None)


def within_family(data: Any, family: tuple[str, ...] | None) -> Any:
    """The parsed knob file with the optimizer knob's values cut to ``family``, the fidelity its
    full-precision AdamW: an 8-bit baseline relaxes to its own family's AdamW and never costs a
    trial of the other's; no family (``None``) keeps the knob file as is (``knobs_in_play`` then
    leaves the knob out)."""
    if family is None or not isinstance(data, dict) or not isinstance(data.get("knobs"), list):
        return data
    knobs = [
        {**k, "values": [v for v in k["values"] if v in family]}
        if isinstance(k, dict) and k.get("name") == "optimizer" and isinstance(k.get("values"), list)
        else k
        for k in data["knobs"]
    ]
    fidelity = data.get("fidelity")
    if isinstance(fidelity, dict) and "optimizer" in fidelity:
        fidelity = {**fidelity, "optimizer": family[-1]}
    return {**data, "knobs": knobs, **({"fidelity": fidelity} if fidelity is not None else {})}
