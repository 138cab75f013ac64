"""ai-toolkit (ostris/ai-toolkit): LoRA training of Flux, Wan, Qwen-Image, ... from one YAML job file.

Facts from the trainer's source at commit 27a03a9 (paths in that repository):
- Launch: ``python run.py CONFIG`` from the checkout (README.md:198, run.py:70-119); its venv is
  ``venv/`` at the checkout's root (README.md:133-134).
- The job file: ``job: extension`` and ``config.process[0]`` (``type: sd_trainer``) holding
  ``model``, ``train``, ``save``, ``sample`` and ``datasets`` (config/examples/*.yaml). Keys are read
  with ``kwargs.get(key, default)`` (toolkit/config_modules.py), so an unknown key is ignored, not
  refused: the knobs below are spelled as that file reads them.
- A bucket with fewer images than the batch is padded to a full batch by repeating them
  (toolkit/dataloader_mixins.py:199-210), so any batch size runs and is as large as asked.
- One loop step is one optimizer step over ``batch_size`` x ``gradient_accumulation`` samples
  (BaseSDTrainProcess.py:2533-2585; config_modules.py:456-463: the legacy
  ``gradient_accumulation_steps`` excludes it).
- Sampling: before training unless ``skip_first_sample``/``disable_sampling``, every
  ``sample_every`` steps and at the end unless ``disable_sampling`` (BaseSDTrainProcess.py:2472-2481,
  :2560, :2820). Saving: every ``save_every`` steps but the first, and always once at the end
  (:2554, :2706-2716, :2819).
- An OOM inside a step is caught, a banner printed and the step skipped; the 4th in a row aborts
  (:2621-2645): ``autotune.core.outcome`` makes the banner a device OOM, so the runner ends the trial.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from autotune.config.yamlconf import RoundTripConfig
from autotune.core.metrics import TrialMetrics
from autotune.core.yamltext import load_yaml
from autotune.errors import CandidateRefused, ConfigError, UsageError
from autotune.trainers.base import TrainerAdapter, TrainerTraits, read_baseline
from autotune.trainers.kit.common import (
    adapter_options,
    check_params,
    check_positive_int,
    folder_command,
    same_value,
)
from autotune.trainers.kit.output import read_trial_metrics
from autotune.trainers.kit.readers.aitklog import read_aitk_output
from autotune.trainers.values import NO_WINNER, Baseline, Params, TrialLaunch, TrialRun, Winner

#: Everything the trainer reads lives in the first process of the job (config/examples/*.yaml).
PROCESS = "config.process.0"
MODEL = f"{PROCESS}.model"
TRAIN = f"{PROCESS}.train"
QUANTIZE_KEY = f"{MODEL}.quantize"
QTYPE_KEY = f"{MODEL}.qtype"
QUANTIZE_TE_KEY = f"{MODEL}.quantize_te"
OFFLOAD_KEY = f"{MODEL}.layer_offloading"
OFFLOAD_PERCENT_KEY = f"{MODEL}.layer_offloading_transformer_percent"
#: Study param -> the key it sets (``qtype`` also sets ``quantize``; the offload fraction also
#: turns ``layer_offloading`` on).
KNOB_KEYS: dict[str, str] = {
    "qtype": QTYPE_KEY,
    "low_vram": f"{MODEL}.low_vram",
    "layer_offloading_transformer_percent": OFFLOAD_PERCENT_KEY,
    "gradient_checkpointing": f"{TRAIN}.gradient_checkpointing",
    "optimizer": f"{TRAIN}.optimizer",
    "batch_size": f"{TRAIN}.batch_size",
}
GRAD_ACCUM_KEY = f"{TRAIN}.gradient_accumulation"
LEGACY_ACCUM_KEY = f"{TRAIN}.gradient_accumulation_steps"
#: The trainer's defaults for keys a job file leaves out (toolkit/config_modules.py @ 27a03a9).
DEFAULTS: dict[str, Any] = {
    QUANTIZE_KEY: False,  # :685
    QTYPE_KEY: "qfloat8",  # :687
    KNOB_KEYS["low_vram"]: False,  # :689
    OFFLOAD_KEY: False,  # :713
    OFFLOAD_PERCENT_KEY: 1.0,  # :730
    KNOB_KEYS["gradient_checkpointing"]: True,  # :413
    KNOB_KEYS["optimizer"]: "adamw",  # :387
    KNOB_KEYS["batch_size"]: 1,  # :393
    GRAD_ACCUM_KEY: 1,  # :460
    LEGACY_ACCUM_KEY: 1,  # :456
    f"{PROCESS}.save.save_every": 1000,  # :25
}
DATASET_RESOLUTION = 512  # config_modules.py:947 (a list is split into one dataset per size, :1098-1113)
DATASET_FRAMES = 1  # config_modules.py:1056
#: The qtype spellings the knob file sweeps (toolkit/util/quantize.py:42-72: torchao's and the
#: ostris uintN backend's, optimum-quanto's ``qfloat8``); ``none`` is ``quantize: false``.
NO_QUANT = "none"
OPTIMIZERS = ("adamw8bit", "adamw")
FRACTION_STEP = 0.05
RUN_ENV = {"PYTHONUNBUFFERED": "1"}
CONFIG_NAME = "config.yaml"


#: The error when no --config is given: what to pass.
NO_CONFIG = (
    "trainer 'ai-toolkit' sweeps your own job file: pass it with --config FILE "
    "(e.g. a copy of config/examples/train_lora_flux_24gb.yaml with your paths)"
)


class AiToolkitAdapter(TrainerAdapter):
    """Options: ``trainer_dir`` (the ai-toolkit checkout, holding ``run.py`` and ``toolkit/``;
    found from the config's or the current folder when omitted), ``launcher`` (the argv that runs
    Python, ``--trainer-python``; default the checkout's ``venv/bin/python``, else ``python``),
    ``hook`` (the trial-side hook: step times, peak memory, the ``--vram-gb`` card; default on)."""

    knob_keys: ClassVar[Mapping[str, str]] = {**KNOB_KEYS, "gradient_accumulation_steps": GRAD_ACCUM_KEY}

    name: ClassVar[str] = "ai-toolkit"
    knob_file: ClassVar[str] = "ai-toolkit.yaml"
    traits: ClassVar[TrainerTraits] = TrainerTraits(
        label="ai-toolkit",
        takes_hook=True,
        takes_trainer_python=True,
        longer_input="a larger image or a longer clip in the datasets",
        report_notes=(
            "ai-toolkit offloads a random choice of layers when layer_offloading_transformer_percent is "
            "below 1 (toolkit/memory_management/manager.py:109-111), seeded only when SEED is set "
            "(run.py:11-44): the same fraction can peak a little differently from run to run, which the "
            "headroom has to cover.",
        ),
    )

    def __init__(self, **options: Any) -> None:
        shared = adapter_options(options, self.name, ("trainer_dir", "launcher", "hook"))
        self.trainer_dir = shared.trainer_dir.resolve() if shared.trainer_dir else None
        self.launcher, self.hook = shared.launcher, shared.hook

    # --- baseline ------------------------------------------------------------------------------

    def load_baseline(self, config: Path | None) -> Baseline:
        return read_baseline(config, self.baseline_from_text, NO_CONFIG)

    def baseline_from_text(self, text: str, path: Path | None = None) -> Baseline:
        source = str(path) if path else "<config>"
        data = load_yaml(text, source)
        process = _get(data, PROCESS, None)
        if not isinstance(process, Mapping) or not isinstance(process.get("train", {}), Mapping):
            raise ConfigError(
                f"{source}: not an ai-toolkit job file: expected 'config: process:' with a first "
                "process (type: sd_trainer) holding model:, train: and datasets:, as in the "
                "trainer's config/examples/*.yaml"
            )
        if _get(data, LEGACY_ACCUM_KEY, 1) != 1:
            raise ConfigError(
                f"{source}: train.gradient_accumulation_steps is {_get(data, LEGACY_ACCUM_KEY, 1)!r}; "
                "autotune sets train.gradient_accumulation (the two exclude each other, "
                "toolkit/config_modules.py:461): write gradient_accumulation instead"
            )
        return Baseline(trainer=self.name, text=text, data=data, path=path)

    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        data = baseline.data
        return {
            "qtype": _qtype_of(data),
            "low_vram": _get(data, KNOB_KEYS["low_vram"], DEFAULTS[KNOB_KEYS["low_vram"]]),
            "layer_offloading_transformer_percent": _offload_of(data),
            "gradient_checkpointing": _get(
                data, KNOB_KEYS["gradient_checkpointing"], DEFAULTS[KNOB_KEYS["gradient_checkpointing"]]
            ),
            "optimizer": str(_get(data, KNOB_KEYS["optimizer"], DEFAULTS[KNOB_KEYS["optimizer"]])).lower(),
            "batch_size": _get(data, KNOB_KEYS["batch_size"], DEFAULTS[KNOB_KEYS["batch_size"]]),
            "gradient_accumulation_steps": _get(data, GRAD_ACCUM_KEY, DEFAULTS[GRAD_ACCUM_KEY]),
        }

    def knobs_in_play(self, baseline: Baseline, names: Sequence[str]) -> list[str]:
        """An optimizer other than AdamW (prodigy, ...) or a qtype the knob file does not list is
        the user's choice, kept as written and not swept. The offload fraction only where the
        model reads it: the legacy Flux/SDXL/SD path never does (``legacy_model``)."""
        params = self.baseline_params(baseline)
        values = _knob_values(self)
        legacy = legacy_model(baseline.data)
        return [
            n
            for n in names
            if (n not in ("optimizer", "qtype") or values.get(n) is None or params[n] in values[n])
            and not (n == "layer_offloading_transformer_percent" and legacy)
        ]

    # --- rendering -----------------------------------------------------------------------------

    def knob_edits(
        self, baseline: Baseline, params: Params, gradient_accumulation_steps: int
    ) -> dict[str, Any]:
        """(key -> value) for the knobs where the candidate differs from what the file says."""
        check_params(params, KNOB_KEYS, self.name)
        check_positive_int("gradient_accumulation_steps", gradient_accumulation_steps)
        data = baseline.data
        base = self.baseline_params(baseline)
        merged = {**base, **params}
        edits: dict[str, Any] = {}
        qtype = merged["qtype"]
        if not isinstance(qtype, str) or not qtype:
            raise ConfigError(f"qtype must be a qtype name or 'none'; got {qtype!r}")
        if qtype != base["qtype"]:
            quantize = qtype != NO_QUANT
            was = bool(_get(data, QUANTIZE_KEY, DEFAULTS[QUANTIZE_KEY]))
            if quantize != was and not _has(data, QUANTIZE_TE_KEY):
                edits[QUANTIZE_TE_KEY] = was  # it follows quantize (config_modules.py:686): kept as it was
            edits[QUANTIZE_KEY] = quantize
            if quantize and _qtype_base(_get(data, QTYPE_KEY, DEFAULTS[QTYPE_KEY])) != qtype:
                edits[QTYPE_KEY] = qtype  # an accuracy recovery adapter (``qtype|ara``) belongs to its qtype
        fraction = merged["layer_offloading_transformer_percent"]
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ConfigError(
                f"layer_offloading_transformer_percent must be a number in [0, 1]; got {fraction!r}"
            )
        if not math.isclose(fraction, base["layer_offloading_transformer_percent"], abs_tol=1e-9):
            if legacy_model(data):
                raise CandidateRefused(
                    f"layer_offloading_transformer_percent {fraction:g}: this job's model loads through "
                    "ai-toolkit's legacy StableDiffusion class (no arch of a newer model: "
                    "toolkit/util/get_model.py:44-50), which never reads the offload fraction; the trial "
                    "would run the baseline again"
                )
            if fraction > 0 and not _get(data, OFFLOAD_KEY, DEFAULTS[OFFLOAD_KEY]):
                edits[OFFLOAD_KEY] = True
            edits[OFFLOAD_PERCENT_KEY] = float(fraction)
        offloading = edits.get(OFFLOAD_KEY, _get(data, OFFLOAD_KEY, DEFAULTS[OFFLOAD_KEY]))
        if qtype == QFLOAT8 and offloading:
            raise CandidateRefused(
                "qtype qfloat8 with layer offloading: ai-toolkit then quantizes with torchao's float8 "
                "instead (config_modules.py:713-717), so the trial would be labelled with a quantizer "
                "that did not run"
            )
        for name in ("low_vram", "gradient_checkpointing"):
            if not isinstance(merged[name], bool):
                raise ConfigError(f"{name} must be true or false; got {merged[name]!r}")
        if merged["optimizer"] not in OPTIMIZERS and merged["optimizer"] != base["optimizer"]:
            raise ConfigError(f"optimizer {merged['optimizer']!r} is not one of {', '.join(OPTIMIZERS)}")
        check_positive_int("batch_size", merged["batch_size"])
        for name in ("low_vram", "gradient_checkpointing", "optimizer", "batch_size"):
            if merged[name] != base[name] or type(merged[name]) is not type(base[name]):
                edits[KNOB_KEYS[name]] = merged[name]
        if gradient_accumulation_steps != base["gradient_accumulation_steps"]:
            edits[GRAD_ACCUM_KEY] = gradient_accumulation_steps
        return edits

    def write_trial(self, baseline: Baseline, params: Params, run: TrialRun) -> TrialLaunch:
        edits = self.knob_edits(baseline, params, run.gradient_accumulation_steps)
        cwd = self.cwd(baseline)
        bucket, datasets = largest_bucket(baseline.data, str(baseline.path or "<config>"))
        edits.update(trial_recipe(baseline.data, run.steps, run.trial_dir))
        edits[f"{PROCESS}.datasets"] = datasets
        cfg = RoundTripConfig.from_text(baseline.text, str(baseline.path or "<baseline>"))
        cfg.set_many({k: v for k, v in edits.items() if not cfg.has(k) or not same_value(cfg.get(k), v)})
        run.trial_dir.mkdir(parents=True, exist_ok=True)
        config_path = run.trial_dir / CONFIG_NAME
        config_path.write_text(cfg.dump(), encoding="utf-8")
        merged = {**self.baseline_params(baseline), **params}
        return TrialLaunch(
            argv=self.train_argv(cwd, config_path),
            cwd=cwd,
            batch_size=merged["batch_size"],
            env=RUN_ENV,
            num_gpus=1,
            record={"job_name": str(_get(baseline.data, "config.name", "")), "data_bucket": bucket},
        )

    def train_argv(self, cwd: Path | None, config_path: Path) -> list[str]:
        """``python run.py CONFIG`` (README.md:198), with the checkout's venv when it has one."""
        return [*self.python(cwd), "run.py", str(config_path)]

    def python(self, cwd: Path | None) -> list[str]:
        if self.launcher is not None:
            return list(self.launcher)
        venv = cwd / "venv" / "bin" / "python" if cwd is not None else None
        return [str(venv)] if venv is not None and venv.is_file() else ["python"]

    # --- where the trainer lives ---------------------------------------------------------------

    def cwd(self, baseline: Baseline) -> Path:
        """The ai-toolkit checkout (``run.py`` beside ``toolkit/``), where trials run."""
        if self.trainer_dir is not None:
            if not is_checkout(self.trainer_dir):
                raise UsageError(
                    f"--trainer-dir {self.trainer_dir}: not an ai-toolkit checkout (expected run.py and "
                    "toolkit/ in it); give the folder you cloned ostris/ai-toolkit into"
                )
            return self.trainer_dir
        hints = [
            *(Path(baseline.path).resolve().parents if baseline.path else []),
            Path.cwd(),
            *Path.cwd().parents,
        ]
        for folder in hints:
            if is_checkout(folder):
                return folder
        raise UsageError(
            "cannot find the ai-toolkit checkout (a folder with run.py and toolkit/) above the config "
            "or the current folder: pass --trainer-dir /path/to/ai-toolkit"
        )

    # --- reading -------------------------------------------------------------------------------

    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        return read_trial_metrics(trial_dir, output, _read_bar, own_rate=False)

    # --- the full run --------------------------------------------------------------------------

    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        cfg = RoundTripConfig.from_text(baseline.text, str(baseline.path or "<baseline>"))
        edits = self.knob_edits(baseline, params, gradient_accumulation_steps)
        cfg.set_many({k: v for k, v in edits.items() if not cfg.has(k) or not same_value(cfg.get(k), v)})
        return cfg.dump()

    def training_command(self, config_path: Path, winner: Winner = NO_WINNER) -> str:
        base = winner.baseline_or_empty(self.name)
        try:
            cwd: Path | None = self.cwd(base)
        except UsageError:
            cwd = None
        argv = self.train_argv(cwd, Path(config_path).resolve())
        return folder_command(cwd or "ai-toolkit", argv)


def _read_bar(text: str, record: Mapping[str, Any]) -> TrialMetrics | None:
    """The job's progress bar (its name from the trial record: the bar's label)."""
    job = record.get("job_name")
    return read_aitk_output(text, job if isinstance(job, str) else None)


def trial_recipe(data: Mapping[str, Any], steps: int, trial_dir: Path) -> dict[str, Any]:
    """The short run: ``steps`` optimizer steps, no sampling, no validation, only the end's save,
    its output under the trial folder (so nothing resumes from the user's runs)."""
    recipe: dict[str, Any] = {
        f"{TRAIN}.steps": steps,
        f"{TRAIN}.disable_sampling": True,  # BaseSDTrainProcess.py:2472, :2477, :2560, :2820
        # saves go to training_folder/name (BaseTrainProcess.py:43-45), and a run resumes from the
        # newest save it finds there (BaseSDTrainProcess.py:884-889): a fresh folder per trial
        f"{PROCESS}.training_folder": str(trial_dir / "output"),
    }
    save_every = _get(data, f"{PROCESS}.save.save_every", DEFAULTS[f"{PROCESS}.save.save_every"])
    if save_every and (not isinstance(save_every, int) or save_every < steps):
        recipe[f"{PROCESS}.save.save_every"] = steps  # no step of 0..steps-1 saves but the end (:2554, :2819)
    if _get(data, f"{TRAIN}.validation_config", None) is not None:
        recipe[f"{TRAIN}.validation_config"] = None  # else it validates at the first step (:2657-2665)
    return recipe


def largest_bucket(data: Mapping[str, Any], source: str) -> tuple[str, list[dict[str, Any]]]:
    """The trial's datasets: the one dataset with the largest (resolution, frames) bucket, at that
    resolution only, and how the report names it."""
    datasets = _get(data, f"{PROCESS}.datasets", None)
    if not isinstance(datasets, list) or not datasets or not all(isinstance(d, Mapping) for d in datasets):
        raise ConfigError(
            f"{source}: config.process[0].datasets names no dataset; add one (folder_path:, "
            "resolution:) as in the trainer's config/examples/*.yaml"
        )
    best: tuple[int, int, int] | None = None
    for i, dataset in enumerate(datasets):
        res = dataset.get("resolution", DATASET_RESOLUTION)
        sizes = res if isinstance(res, list) else [res]
        frames = dataset.get("num_frames", DATASET_FRAMES)
        if not sizes or not all(_positive_int(s) for s in sizes) or not _positive_int(frames):
            raise ConfigError(
                f"{source}: datasets[{i}]: resolution must be a whole number or a list of them and "
                f"num_frames a whole number; got resolution {res!r}, num_frames {frames!r}"
            )
        if dataset.get("batch_size") is not None:
            raise ConfigError(
                f"{source}: datasets[{i}] sets its own batch_size, which overrides train.batch_size "
                "(toolkit/data_loader.py:707-708), so the sweep's batch would not apply: remove it"
            )
        key = (max(sizes) ** 2 * frames, max(sizes), frames)
        if best is None or key[0] > best[0]:  # a tie keeps the first
            best, chosen = key, i
    assert best is not None
    dataset = dict(datasets[chosen])
    dataset["resolution"] = [best[1]]
    where = dataset.get("folder_path", f"datasets[{chosen}]")
    frames = f"{best[2]} frames" if best[2] > 1 else "1 frame"
    text = f"resolution {best[1]}, {frames} (the largest bucket of the datasets: {where})"
    return text, [dataset]


def is_checkout(folder: Path) -> bool:
    return (folder / "run.py").is_file() and (folder / "toolkit").is_dir()


def _knob_values(adapter: TrainerAdapter) -> dict[str, list[Any]]:
    try:
        from autotune.config.yamlconf import load_yaml_file

        knobs = load_yaml_file(adapter.knob_path())["knobs"]
        return {k["name"]: list(k["values"]) for k in knobs if isinstance(k.get("values"), list)}
    except Exception:  # a missing or odd knob file: every knob in play
        return {}


def _qtype_base(qtype: Any) -> Any:
    """``uint4|org/ara.safetensors`` -> ``uint4`` (config_modules.py:742-743)."""
    return qtype.split("|", 1)[0] if isinstance(qtype, str) else qtype


#: optimum-quanto's float8, which ai-toolkit swaps for torchao's ``float8`` under layer offloading.
QFLOAT8 = "qfloat8"
#: ``model.arch`` values ai-toolkit loads through its legacy ``StableDiffusion`` class: no model
#: class claims them (toolkit/util/get_model.py:44-50), they only set the old ``is_*`` flags
#: (config_modules.py:770-797). That class never reads ``layer_offloading_transformer_percent``
#: (only the newer model classes do, e.g. flux2_model.py:170-178).
LEGACY_ARCHS = frozenset(
    {
        "sd1",
        "sd2",
        "sd3",
        "sdxl",
        "pixart",
        "pixart_sigma",
        "auraflow",
        "flux",
        "flex1",
        "lumina2",
        "vega",
        "ssd",
    }
)


def legacy_model(data: Mapping[str, Any]) -> bool:
    """Whether the job's model loads through the legacy StableDiffusion class (no ``arch``, the
    old ``is_flux``/``is_xl`` flags, or an arch of ``LEGACY_ARCHS``)."""
    arch = _get(data, f"{MODEL}.arch", None)
    if not isinstance(arch, str) or not arch:
        return True
    return arch.split(":", 1)[0] in LEGACY_ARCHS


def _qtype_of(data: Mapping[str, Any]) -> Any:
    """The qtype that runs: with layer offloading on, qfloat8 runs as torchao's ``float8``
    (config_modules.py:713-717), which the knob file does not sweep."""
    if not _get(data, QUANTIZE_KEY, DEFAULTS[QUANTIZE_KEY]):
        return NO_QUANT
    qtype = _qtype_base(_get(data, QTYPE_KEY, DEFAULTS[QTYPE_KEY]))
    if qtype == QFLOAT8 and _get(data, OFFLOAD_KEY, DEFAULTS[OFFLOAD_KEY]):
        return "float8"
    return qtype


def _offload_of(data: Mapping[str, Any]) -> Any:
    """The transformer's offloaded fraction: 0 unless ``layer_offloading`` (a model attaches its
    memory manager only with both, e.g. flux2_model.py:170-178), snapped to the knob's step. A
    value that is no number in [0, 1] is left as written: the sweep's baseline check names it."""
    if not _get(data, OFFLOAD_KEY, DEFAULTS[OFFLOAD_KEY]):
        return 0.0
    value = _get(data, OFFLOAD_PERCENT_KEY, DEFAULTS[OFFLOAD_PERCENT_KEY])
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        return value  # (NaN fails the range too)
    return round(round(value / FRACTION_STEP) * FRACTION_STEP, 2)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _get(data: Any, dotted: str, default: Any) -> Any:
    node = data
    for part in dotted.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return default
    return node


def _has(data: Any, dotted: str) -> bool:
    sentinel = object()
    return _get(data, dotted, sentinel) is not sentinel
