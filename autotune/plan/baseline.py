"""The plan: the trainer's own baseline config for the card's tier, with only the paths patched.

``make_plan`` is the library entry point (``autotune plan`` and the sweep call it):
it finds the card (``--vram-gb`` or the probe), its tier, the tier's shipped config
in the user's trainer checkout, checks its keys against the schema, patches the
four paths (made absolute, checked), and works out how several GPUs launch and
what that does to the effective batch. Nothing is written until ``write_plan``.
The baseline text keeps every other line byte for byte: comments are for people.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.config.schema import check_keys
from autotune.config.yamlconf import RoundTripConfig, read_config_text
from autotune.core.metrics import effective_batch
from autotune.errors import AutotuneError, UnknownTrainerError, UnsupportedCardError, UsageError
from autotune.execution.launch import check_program
from autotune.gpu.nvml import Nvml
from autotune.gpu.probe import probe
from autotune.gpu.tiers import TierInfo, classify
from autotune.plan.files import PATH_KEYS, abs_path, locate_config, patch_paths
from autotune.trainers import Baseline, TrainerAdapter, adapter_class, adapter_names, get_adapter

DEFAULT_PLAN_FILE = Path("autotune-runs") / "plan.yaml"
#: What the LTX-2 trainer's code assumes when a key is left out (the example files differ).
LTX2_CODE_DEFAULTS = {"optimization.batch_size": 2, "optimization.gradient_accumulation_steps": 1}


@dataclass(frozen=True)
class LaunchPlan:
    """How the plan's config is trained: one process, or ``accelerate launch`` with DDP or FSDP."""

    num_gpus: int
    mode: str  # "single", "ddp" (LoRA on several GPUs) or "fsdp" (full fine-tune on several GPUs)
    command: str
    cwd: Path | None
    accelerate_config: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "num_gpus": self.num_gpus,
            "mode": self.mode,
            "command": self.command,
            "cwd": str(self.cwd) if self.cwd else None,
            "accelerate_config": self.accelerate_config,
        }


@dataclass
class Plan:
    """Everything the plan decided. ``text`` is the config to write (``None``: no checkout was given)."""

    trainer: str
    vram_gb: float
    vram_source: str  # "--vram-gb" or "probe"
    card: str | None
    num_gpus: int
    tier: TierInfo
    forced: bool
    config_name: str  # the shipped file the plan starts from, e.g. t2v_lora_low_vram.yaml
    source_path: Path | None  # where it was read (None: no trainer checkout given)
    source_text: str | None  # as read
    text: str | None  # as planned: paths patched (and grad-accum for several GPUs)
    patched: dict[str, Any] = field(default_factory=dict)
    unset_paths: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    launch: LaunchPlan | None = None
    batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    target_effective_batch: int | None = None
    output_path: Path | None = None  # where write_plan puts it (and what the launch line names)
    written: bool = False
    package_dir: Path | None = None  # the trainer package (cwd of its launch), when known
    trainer_python: str | None = None  # --trainer-python: the launch runs it instead of uv

    @property
    def effective_batch(self) -> int | None:
        if self.batch_size is None or self.gradient_accumulation_steps is None:
            return None
        return effective_batch(self.batch_size, self.gradient_accumulation_steps, self.num_gpus)

    @property
    def verbatim(self) -> bool:
        """True when only paths were patched: the trainer's own config as shipped."""
        return all(k in PATH_KEYS.values() for k in self.patched)

    def data(self) -> dict[str, Any]:
        """The planned config as plain data (empty without a checkout)."""
        if self.text is None:
            return {}
        plain = RoundTripConfig.from_text(self.text, str(self.source_path)).to_plain()
        return plain if isinstance(plain, dict) else {}

    def to_baseline(self) -> Baseline:
        """The adapters' ``Baseline``: the planned text, its data, and the plan's facts in ``extra``."""
        if self.text is None:
            raise UsageError("this plan has no config to sweep from: give --trainer-dir (or --config FILE)")
        return Baseline(
            trainer=self.trainer,
            text=self.text,
            data=self.data(),
            path=self.output_path if self.written else self.source_path,
            num_gpus=self.num_gpus,
            extra={
                "tier": self.tier.tier,
                "vram_gb": self.vram_gb,
                "relax": self.tier.relax,
                "source_path": str(self.source_path) if self.source_path else None,
                "package_dir": str(self.package_dir) if self.package_dir else None,
                "launch_mode": self.launch.mode if self.launch else "single",
                "target_effective_batch": self.target_effective_batch,
            },
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": self.tier.tier,
            "vram_gb": self.vram_gb,
            "vram_source": self.vram_source,
            "nominal_gb": self.tier.nominal_gb,
            "card": self.card,
            "num_gpus": self.num_gpus,
            "trainer": self.trainer,
            "supported": self.tier.supported,
            "forced": self.forced,
            "baseline": {
                "kind": self.tier.baseline,
                "config": self.config_name,
                "source": str(self.source_path) if self.source_path else None,
                "relax": self.tier.relax,
                "verbatim": self.verbatim,
            },
            "config_path": str(self.output_path) if self.written and self.output_path else None,
            "patched": {k: v for k, v in self.patched.items()},
            "unset_paths": list(self.unset_paths),
            "batch": {
                "batch_size": self.batch_size,
                "gradient_accumulation_steps": self.gradient_accumulation_steps,
                "num_gpus": self.num_gpus,
                "effective_batch": self.effective_batch,
                "target_effective_batch": self.target_effective_batch,
                "kept": self.effective_batch == self.target_effective_batch,
            },
            "launch": self.launch.to_json() if self.launch else None,
            "tier_info": self.tier.to_json(),
            "warnings": list(self.warnings),
        }

    def render_text(self) -> str:
        t = self.tier
        if self.card:
            card = f"{self.card}, {self.vram_gb:g} GiB (probed)"
        else:
            card = f"{self.vram_gb:g} GB (--vram-gb)"
        gpus = f"{self.num_gpus} GPUs" if self.num_gpus > 1 else "1 GPU"
        lines = [f"Card: {card}, {t.label()} -> tier {t.tier}; {gpus}"]
        where = str(self.source_path) if self.source_path else f"{self.config_name} (no checkout read)"
        lines.append(f"Baseline: {where}")
        lines.append(f"  {t.note}")
        lines.extend(f"  note: {n}" for n in t.notes)
        if self.patched:
            lines.append("Patched:")
            lines.extend(f"  {k}: {v}" for k, v in self.patched.items())
        if self.effective_batch is not None:
            lines.append(
                f"Batch: {self.batch_size} per GPU x {self.gradient_accumulation_steps} accumulation x "
                f"{gpus} = effective batch {self.effective_batch}"
            )
        if self.launch:
            lines.append(f"Launch ({self.launch.mode}):")
            lines.append(f"  {self.launch.command}")
        if self.written:
            lines.append(f"Wrote {self.output_path}")
        for w in self.warnings:
            lines.append(f"warning: {w}")
        if self.written:
            lines.append(f"Next: {shlex.join(self.sweep_argv())}")
        return "\n".join(lines)

    def sweep_argv(self) -> list[str]:
        """The sweep of the written plan, runnable as it is from any folder: the trainer's package
        (its trials run there), the card planned for when it was not probed, the trainer's Python."""
        argv = ["autotune", "sweep", "--trainer", self.trainer, "--config", str(self.output_path)]
        if self.package_dir is not None:
            argv += ["--trainer-dir", str(self.package_dir)]
        if self.vram_source == "--vram-gb":
            argv += ["--vram-gb", f"{self.vram_gb:g}"]
        if self.forced:
            argv.append("--force")
        if self.trainer_python:
            argv += ["--trainer-python", self.trainer_python]
        return argv


def make_plan(
    *,
    trainer: str = "ltx2",
    trainer_dir: Path | None = None,
    vram_gb: float | None = None,
    gpus: int | None = None,
    config: str | None = None,
    model: str | Path | None = None,
    text_encoder: str | Path | None = None,
    data: str | Path | None = None,
    output_dir: str | Path | None = None,
    force: bool = False,
    output: Path | None = None,
    trainer_python: Path | str | None = None,
    open_nvml: Callable[[], Nvml] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Plan:
    """Decide the plan; write nothing. ``output`` is where ``write_plan`` will put it (default
    ``./autotune-runs/plan.yaml`` when there is a config to write); the launch line names it.

    Raises ``UsageError`` (and children) for bad input: unknown trainer, missing or
    wrong paths, unknown config keys, a card below 32 GB without ``force``.
    """
    cwd = cwd or Path.cwd()
    adapter = _check_trainer(trainer)
    python = check_program(str(trainer_python), "--trainer-python") if trainer_python is not None else None
    warnings: list[str] = []
    vram, source, card, num_gpus = _card(vram_gb, gpus, open_nvml, env, warnings)
    tier = classify(vram)
    if not tier.supported:
        if not force:
            raise UnsupportedCardError(
                f"a {vram:g} GB card is in tier {tier.tier}: the LTX-2 trainer requires a 32 GB card, and no "
                "tested config exists below it. Pass --force to try the low-VRAM config "
                f"({tier.baseline_file('ltx2')}) at your own risk, or plan for a bigger card with --vram-gb N."
            )
        warnings.append(
            f"--force: planning the low-VRAM config for a {vram:g} GB card, below the trainer's 32 GB minimum; "
            "expect out-of-memory failures"
        )
    package_dir, source_path = locate_config(adapter, trainer_dir, config, tier, cwd, warnings)
    config_name = source_path.name if source_path else (config or tier.baseline_file(trainer))
    plan = Plan(
        trainer=trainer,
        vram_gb=vram,
        vram_source=source,
        card=card,
        num_gpus=num_gpus,
        tier=tier,
        forced=force and not tier.supported,
        config_name=config_name,
        source_path=source_path,
        source_text=None,
        text=None,
        warnings=warnings,
        package_dir=package_dir,
        output_path=abs_path(output, cwd) if output else None,
        trainer_python=python,
    )
    if source_path is not None and plan.output_path is None:
        plan.output_path = cwd / DEFAULT_PLAN_FILE
    if source_path is None:
        if any(p is not None for p in (model, text_encoder, data, output_dir)):
            raise UsageError(
                "path flags (--model, --text-encoder, --data, --output-dir) patch the trainer's config, "
                "so they need the checkout: add --trainer-dir DIR"
            )
        if output is not None:
            raise UsageError(
                "-o writes the planned config, which is read from the checkout: add --trainer-dir DIR"
            )
        return plan
    text = _read(source_path)
    plan.source_text = text
    check_keys(
        text, str(source_path), extra_sections=adapter.traits.config_sections, trainer=adapter.traits.label
    )
    rt = RoundTripConfig.from_text(text, str(source_path))
    given = {"model": model, "text_encoder": text_encoder, "data": data, "output_dir": output_dir}
    paths = patch_paths(
        rt, given, cwd, package=package_dir, loads_model_paths=adapter.traits.loads_model_paths
    )
    plan.patched.update(paths.patched)
    plan.unset_paths.extend(paths.unset)
    plan.warnings.extend(paths.warnings)
    _batch_and_launch(plan, rt, adapter)
    plan.text = rt.dump()
    return plan


def write_plan(plan: Plan) -> Path:
    """Write the planned config to ``plan.output_path`` (what its launch line names); returns it."""
    target = plan.output_path
    if target is None or plan.text is None:
        raise UsageError(
            "nothing to write: the plan has no config (give --trainer-dir) or no output path (-o FILE)"
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(plan.text, encoding="utf-8")
    except OSError as exc:
        raise AutotuneError(
            f"cannot write the plan to {target}: {exc.strerror}; pick another -o FILE"
        ) from None
    plan.output_path, plan.written = target, True
    return target


# --- steps -------------------------------------------------------------------------------------


def _check_trainer(trainer: str) -> type[TrainerAdapter]:
    """The adapter class of a trainer whose baselines ``plan`` knows (``plan_baselines``)."""
    planned = [name for name in adapter_names() if adapter_class(name).traits.plan_baselines]
    if trainer in planned:
        return adapter_class(trainer)
    if trainer in adapter_names():
        raise UsageError(
            f"'autotune plan' knows the baselines of {', '.join(planned)}; for the {trainer!r} trainer, "
            f"pass your own config to 'autotune sweep --trainer {trainer} --config FILE'"
        )
    raise UnknownTrainerError(
        f"unknown trainer {trainer!r}; 'autotune plan' knows: {', '.join(planned)}. "
        "Pick one with --trainer NAME."
    )


def _card(
    vram_gb: float | None,
    gpus: int | None,
    open_fn: Callable[[], Nvml] | None,
    env: Mapping[str, str] | None,
    warnings: list[str],
) -> tuple[float, str, str | None, int]:
    """(vram GB, where it came from, card name, number of GPUs)."""
    if gpus is not None and gpus < 1:
        raise UsageError(f"--gpus must be 1 or more; got {gpus}")
    if vram_gb is not None:
        if not (math.isfinite(vram_gb) and vram_gb > 0):
            raise UsageError(f"--vram-gb must be a positive number of GB, like 48 or 79.6; got {vram_gb!r}")
        return float(vram_gb), "--vram-gb", None, gpus or 1
    found = probe(open_fn, env)
    smallest = found.smallest
    if smallest is None or smallest.memory_total_bytes <= 0:
        why = found.reason if not found.available else "no GPU is visible to this process"
        raise UsageError(
            f"cannot size the card: {why}. Plan for a card with --vram-gb N (for example --vram-gb 48, "
            "or 80 for an H100), and --gpus N for several."
        )
    count = found.count
    if found.mixed and gpus is None:
        warnings.append(
            f"mixed cards ({', '.join(found.models)}): planning for one GPU, the smallest; choose cards of "
            "one model with CUDA_VISIBLE_DEVICES, or pass --gpus N"
        )
        count = 1
    if gpus is not None and gpus > found.count:
        warnings.append(f"--gpus {gpus}, but only {found.count} GPU(s) are visible here")
    return round(smallest.memory_total_gib, 2), "probe", smallest.name, gpus or count


def _batch_and_launch(plan: Plan, rt: RoundTripConfig, adapter: type[TrainerAdapter]) -> None:
    """Effective batch kept over several GPUs by lowering grad accumulation; the launch line."""
    for dotted, default in LTX2_CODE_DEFAULTS.items():
        if not rt.has(dotted):
            plan.warnings.append(
                f"{dotted} is not set, so the trainer's code default ({default}) applies; write it explicitly"
            )
    bs = _int(rt.get("optimization.batch_size", LTX2_CODE_DEFAULTS["optimization.batch_size"]), 2)
    ga = _int(
        rt.get(
            "optimization.gradient_accumulation_steps",
            LTX2_CODE_DEFAULTS["optimization.gradient_accumulation_steps"],
        ),
        1,
    )
    n = plan.num_gpus
    plan.batch_size, plan.target_effective_batch = bs, effective_batch(bs, ga, 1)
    full = rt.get("model.training_mode") == "full"
    if adapter.traits.single_device and n > 1:
        plan.warnings.append(f"{adapter.traits.label} runs on one device; planning 1 GPU, not {n}")
        n = plan.num_gpus = 1
    if n > 1:
        if ga % n == 0:
            new = ga // n
            rt.set("optimization.gradient_accumulation_steps", new)
            plan.patched["optimization.gradient_accumulation_steps"] = new
            ga = new
        else:
            plan.warnings.append(
                f"cannot keep the effective batch {bs * ga} on {n} GPUs: gradient_accumulation_steps {ga} "
                f"cannot be divided by {n}, so it stays and the effective batch becomes {bs * ga * n}; "
                f"set it to a multiple of {n} to keep it, or lower the learning rate to match"
            )
    plan.gradient_accumulation_steps = ga
    if full and (n == 1 or plan.tier.tier != "80GB+"):
        where = "a single GPU" if n == 1 else f"cards in tier {plan.tier.tier}"
        plan.warnings.append(
            f"full fine-tune (model.training_mode: full) on {where}: the 22B model's weights, gradients and "
            "optimizer state rarely fit; LoRA (training_mode: lora, e.g. --config t2v_lora.yaml) trains in a "
            "fraction of the memory"
        )
    if full and rt.get("acceleration.quantization"):
        plan.warnings.append(
            "the trainer rejects acceleration.quantization with training_mode: full; set it to null"
        )
    plan.launch = _launch(plan, n, full)


def _launch(plan: Plan, n: int, full: bool) -> LaunchPlan:
    """How the planned config trains: the adapter's own launch line (what a trial runs), with the
    accelerate config the plan chose for several GPUs, run from the trainer package when known."""
    config = plan.output_path or Path("PLAN.yaml")
    pkg = plan.package_dir
    mode, acc = "single", None
    if n > 1:
        mode = "fsdp" if full else "ddp"
        acc = f"configs/accelerate/{mode}.yaml"
        if pkg is not None and not (pkg / acc).is_file():
            plan.warnings.append(
                f"{pkg / acc} is missing from the checkout; accelerate will use its own defaults"
            )
            acc = None
    launcher = {"launcher": [plan.trainer_python]} if plan.trainer_python else {}
    adapter = get_adapter(plan.trainer, accelerate_config=acc or "none", **launcher)
    argv = adapter.launch_argv(
        Baseline(trainer=plan.trainer, text="", data={}, num_gpus=n), config, progress_bars=False
    )
    cd = f"cd {shlex.quote(str(pkg))} && " if pkg else ""
    return LaunchPlan(n, mode, cd + shlex.join(argv), pkg, acc)


# --- helpers -----------------------------------------------------------------------------------


def _read(path: Path) -> str:
    return read_config_text(path)


def _int(value: Any, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return default
    return value
