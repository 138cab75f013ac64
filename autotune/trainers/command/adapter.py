"""Any trainer, from a command template (``--cmd``).

The template is split into argv once, with ``shlex``, and the placeholders are
filled in per argv element: nothing goes through a shell, so ``x; rm -rf ~`` in a
template or a value stays a literal argument. Placeholders: the study's params
(the knob names), ``{config}`` (the rendered YAML), ``{steps}``,
``{gradient_accumulation_steps}``, ``{trial_dir}``; ``{{``/``}}`` are literal braces.
An unknown placeholder is a ``UsageError`` when the adapter is made, before anything runs.
A template written as a launcher (``export`` lines, ``cd DIR &&``, ``NAME=value`` prefixes,
``$VAR``) is read by ``autotune.config.shellscript`` instead, still without a shell: its
exports become the trials' environment, ``cd DIR`` their folder (``command.template``).

``{config}``: the baseline config (``--config``) with the knobs written into the keys
named by ``config_keys`` (by default LTX-2's keys when the file has an
``optimization:`` section), or, with no baseline config, a flat YAML of the params.
Metrics: ``AUTOTUNE_METRICS_FILE`` first, then the LTX-2 statistics block and Step lines, the
hook, and the formats trainers print (``readers.chain``: Hugging Face ``Trainer`` log dicts,
``iter N: loss X, time Yms`` lines, pytorch/examples' ``| ms/batch N |`` lines, the training tqdm
bar, Lightning's bar).

Knobs: only those the command receives are swept (``knobs_in_play``): a ``{placeholder}`` of
the template, or a key the ``{config}`` file holds. Knobs declared with ``--knob NAME=...``
(the ``knobs`` option) are placeholders too, and config keys where the baseline config has
them; an unknown placeholder's error says how to declare one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import yaml

from autotune.config.yamlconf import RoundTripConfig, read_config_text
from autotune.core.metrics import Readings, TrialMetrics
from autotune.core.space import from_study_value, to_study_value
from autotune.core.verdict import combine
from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigError, UsageError
from autotune.trainers.base import TrainerAdapter, TrainerTraits
from autotune.trainers.command.template import KNOBS, CommandTemplate
from autotune.trainers.kit.common import (
    check_params,
    check_positive_int,
    effective_batch_of,
    folder_command,
    hook_option,
    read_trial_record,
    same_value,
    take_options,
)
from autotune.trainers.kit.output import read_output, trainer_reading
from autotune.trainers.kit.readers.chain import printed_readings
from autotune.trainers.kit.readers.hookfile import HOOK_FILE_NAME, read_hook_file
from autotune.trainers.kit.readers.ltx2log import parse_ltx2_output
from autotune.trainers.kit.readers.metricsfile import METRICS_FILE_NAME, read_metrics_file
from autotune.trainers.kit.readers.runblock import real_batch
from autotune.trainers.kit.yamlkeys import GRAD_ACCUM_KEY, KNOB_KEYS, STEPS_KEY, get_dotted
from autotune.trainers.values import NO_WINNER, Baseline, Params, TrialLaunch, TrialRun, Winner

LTX2_CONFIG_KEYS = {**KNOB_KEYS, "gradient_accumulation_steps": GRAD_ACCUM_KEY, "steps": STEPS_KEY}


#: Below this share of the batch the template gives, per optimizer step, what the data loaders
#: yielded does not describe what the steps train.
REUSED_SHARE = 0.5


def reused_batches(counted_per_step: float | None, batch: float | None) -> bool:
    """Whether a script steps again on batches it drew: its loaders yielded under half the batch it
    was given per optimizer step (pytorch/examples' mnist_forward_forward draws one batch,
    ``next(iter(train_loader))``, and trains two layers on it for every epoch: main.py:163, 52-56,
    72-82 at 77f55b9). A partial last batch or a loader's look-ahead stays far above the line."""
    return bool(counted_per_step is not None and batch and counted_per_step < REUSED_SHARE * batch)


def _given_baseline(given: Any, known: Sequence[str]) -> dict[str, Any]:
    """``--baseline NAME=VALUE`` values by name (parsed as ``--knob`` lists are: yes/no booleans,
    whole numbers ints); a name that is no knob of the template's is a usage error."""
    if not given:
        return {}
    if not isinstance(given, Mapping):
        raise UsageError("baseline must map a knob name to its value")
    names = [*known, "gradient_accumulation_steps"]
    bad = sorted(set(given) - set(names))
    if bad:
        raise UsageError(
            f"--baseline {bad[0]}=...: {bad[0]!r} is no knob of this sweep; known: {', '.join(names)} "
            "(declare your own with --knob NAME=VALUES)"
        )
    return {str(k): v for k, v in given.items()}


def _study_value(param: str, value: Any, declared: Sequence[str]) -> Any:
    """A baseline value as the study stores it (a quantization or declared knob's by its text)."""
    return to_study_value(value) if param in ("quantization", *declared) else value


def _has_key(data: Any, key: str) -> bool:
    missing = object()
    return isinstance(data, Mapping) and get_dotted(data, key, missing) is not missing


class CommandAdapter(TrainerAdapter):
    """Options: ``template`` (the command, required), ``cwd`` (where it runs; default the current
    folder), ``config_keys`` (param -> dotted key in the config, also for ``steps`` and
    ``gradient_accumulation_steps``), ``hook`` (inject the trial-side hook: step times, memory,
    losses, real batches, the ``--vram-gb`` card; default on), ``knobs`` (names declared with
    ``--knob``: placeholders too, and config keys where the baseline config has them), ``flags``
    (declared flag knobs -> the switch, e.g. ``{"ckpt": "--grad-checkpointing"}``: ``{ckpt}`` is it when
    true and no argument at all when false), ``baseline`` (``--baseline NAME=VALUE``: the values the
    command runs with today, for knobs no config holds), ``default_batch`` (the baseline's batch
    when neither gives one: the smallest of ``--batch-sizes``; else 1)."""

    name: ClassVar[str] = "command"
    knob_file: ClassVar[str] = "command.yaml"
    traits: ClassVar[TrainerTraits] = TrainerTraits(
        label="your trainer",
        takes_template=True,
        takes_hook=True,
    )

    def __init__(self, **options: Any) -> None:
        take_options(
            options,
            self.name,
            ("template", "cwd", "config_keys", "hook", "knobs", "flags", "baseline", "default_batch"),
        )
        self.command = CommandTemplate.read(
            options.get("template"), options.get("knobs"), options.get("flags")
        )
        self.declared = self.command.declared
        self.given = _given_baseline(options.get("baseline"), (*KNOBS, *self.declared))
        self.default_batch = options.get("default_batch") or 1
        check_positive_int("default_batch", self.default_batch)
        # The cwd option wins (a report rebuilds the adapter with the folder the trials ran in).
        self.cwd = Path(options.get("cwd") or self.command.cwd or ".").expanduser().resolve()
        keys = options.get("config_keys")
        if keys is not None:
            if not isinstance(keys, Mapping):
                raise UsageError("config_keys must map a param name to a dotted config key")
            bad = sorted(set(keys) - set(LTX2_CONFIG_KEYS))
            if bad:
                raise UsageError(
                    f"config_keys has unknown param(s) {', '.join(bad)}; known: {', '.join(LTX2_CONFIG_KEYS)}"
                )
        self.config_keys: dict[str, str] | None = dict(keys) if keys is not None else None
        self.hook = hook_option(options, self.name)

    def load_baseline(self, config: Path | None) -> Baseline:
        if config is None:
            return Baseline(trainer=self.name, text="", data={})
        text = read_config_text(Path(config))
        if Path(config).suffix in (".sh", ".bash"):
            raise ConfigError(
                f"{config}: --config is the YAML config that {{config}} receives; a launcher script is "
                f'the command itself: pass it as --cmd "$(cat {config})" (its exports, cd and $VARs '
                "are read without a shell), with {batch_size}-style placeholders where knobs go"
            )
        data = load_yaml(text, str(config))
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{config}: expected a mapping at the top of the config")
        return Baseline(trainer=self.name, text=text, data=data, path=Path(config))

    def _keys(self, baseline: Baseline) -> dict[str, str]:
        """Param -> dotted config key the rendered ``{config}`` writes it to. A declared knob
        (``--knob NAME=...``) is written to key NAME only where the baseline config has it."""
        declared = {n: n for n in self.declared if _has_key(baseline.data, n)}
        if self.config_keys is not None:
            return {**declared, **self.config_keys}
        if isinstance(baseline.data.get("optimization"), Mapping):
            return {**declared, **LTX2_CONFIG_KEYS}
        # A flat record (what this adapter writes with no baseline config): the params by name.
        return {**declared, **{k: k for k in LTX2_CONFIG_KEYS if _has_key(baseline.data, k)}}

    def knobs_in_play(self, baseline: Baseline, names: Sequence[str]) -> list[str]:
        """The knobs the command really receives: a ``{placeholder}`` of the template, or, when the
        template passes ``{config}``, a key the config holds (or ``config_keys`` names). With no
        ``--config``, ``{config}`` is a flat YAML that holds every knob: all are received."""
        used = self.command.used()
        via_config: set[str] = set()
        if "config" in used and not baseline.text:
            return list(names)
        if "config" in used:
            keys = self._keys(baseline)
            explicit = set(self.config_keys or ())
            via_config = {n for n, key in keys.items() if n in explicit or _has_key(baseline.data, key)}
        return [n for n in names if n in used or n in via_config]

    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        """Values the baseline config holds under ``config_keys``, or ``--baseline`` gives (never
        both for one knob); else the memory-saving end (batch ``default_batch``)."""
        out: dict[str, Any] = {
            "quantization": "int8-quanto",
            "optimizer": "adamw8bit",
            "batch_size": self.default_batch,
            "gradient_checkpointing": True,
            "gradient_accumulation_steps": 1,
        }
        missing = object()
        for param, key in self._keys(baseline).items():
            value = get_dotted(baseline.data, key, missing)
            if param == "steps" or value is missing:
                continue
            if param in self.given:
                raise UsageError(
                    f"--baseline {param}={self.given[param]} and {baseline.path}: {key} both give the "
                    f"baseline's {param}; keep one of them"
                )
            out[param] = _study_value(param, value, self.declared)
        unused = [n for n in self.given if n not in self.knobs_in_play(baseline, list(self.given))]
        if unused:
            raise UsageError(
                f"--baseline {unused[0]}=...: the command never receives {unused[0]} (no {{{unused[0]}}} in "
                "--cmd, no such key in its --config), so its baseline value would change nothing; drop it "
                f"or put {{{unused[0]}}} where your script takes it"
            )
        for param, value in self.given.items():
            out[param] = _study_value(param, value, self.declared)
        return out

    def knob_location(self, baseline: Baseline, param: str) -> str:
        if param in self.given:
            return f"--baseline {param}"
        return f"{baseline.path or '<config>'}: {self._keys(baseline).get(param, param)}"

    def _params(self, baseline: Baseline, params: Params, gradient_accumulation_steps: int) -> dict[str, Any]:
        check_params(params, (*KNOBS, *self.declared), self.name)
        check_positive_int("gradient_accumulation_steps", gradient_accumulation_steps)
        merged = {**self.baseline_params(baseline), **params}
        merged["gradient_accumulation_steps"] = gradient_accumulation_steps
        check_positive_int("batch_size", merged["batch_size"])
        return merged

    def _config_text(
        self, baseline: Baseline, values: Mapping[str, Any], steps: int | None, knobs: Collection[str]
    ) -> str:
        if not baseline.text:  # the knobs the trial was given (the ones in play), by name
            record = {k: values[k] for k in (*KNOBS, *self.declared) if k in knobs}
            record["gradient_accumulation_steps"] = values["gradient_accumulation_steps"]
            if steps is not None:
                record["steps"] = steps
            return yaml.safe_dump(record, sort_keys=False)
        cfg = RoundTripConfig.from_text(baseline.text, str(baseline.path or "<config>"))
        for param, key in self._keys(baseline).items():
            if param == "steps":
                if steps is None:
                    continue
                value: Any = steps
            else:
                value = values[param]
                if param == "quantization":  # a declared knob's value is written as listed
                    value = from_study_value(value)
            if not cfg.has(key) or not same_value(cfg.get(key), value):
                cfg.set(key, value)
        return cfg.dump()

    def steps_warning(self, baseline: Baseline, steps: int) -> str | None:
        """No ``{steps}`` in the template and no steps key in the ``{config}`` it passes: each
        trial runs the script's own length. Said before the first trial, not found out after."""
        used = self.command.used()
        if "steps" in used:
            return None
        if "config" in used and (not baseline.text or "steps" in self._keys(baseline)):
            return None  # the rendered config carries the step count
        return (
            f"warning: the command template has no {{steps}}: trials cannot be told to run {steps} steps, "
            "so each runs the script's own length (its epochs or step count); the steps each really ran "
            "are recorded, and a trial with too few steady steps to time says so. Pass the count through "
            "{steps} (e.g. --max-steps {steps}) to time every trial alike."
        )

    def launch_folder(self) -> Path | None:
        return self.cwd

    def write_trial(self, baseline: Baseline, params: Params, run: TrialRun) -> TrialLaunch:
        values = self._params(baseline, params, run.gradient_accumulation_steps)
        run.trial_dir.mkdir(parents=True, exist_ok=True)
        config_path = run.trial_dir / "config.yaml"
        config_path.write_text(self._config_text(baseline, values, run.steps, params), encoding="utf-8")
        argv = self.command.fill(
            {**values, "config": config_path, "steps": run.steps, "trial_dir": run.trial_dir}
        )
        env = {"PYTHONUNBUFFERED": "1", "COLUMNS": "250", **self.command.env}
        return TrialLaunch(
            argv=argv, cwd=self.cwd, batch_size=values["batch_size"], env=env, record={"argv": argv}
        )

    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        try:
            trial_dir = Path(trial_dir)
            record = read_trial_record(trial_dir)
            batch = effective_batch_of(record)
            file_metrics = read_metrics_file(trial_dir / METRICS_FILE_NAME)
            text = read_output(trial_dir, output)
            log = parse_ltx2_output(text).to_metrics(batch)
            hook = read_hook_file(trial_dir / HOOK_FILE_NAME)
            accumulation = record.get("gradient_accumulation_steps")
            printed = printed_readings(text, accumulation if isinstance(accumulation, int) else 1)
            own = trainer_reading(file_metrics, log, *printed, own_rate=True)
            real = real_batch(text, batch)  # a diffusers-style script's partial batches count as partial
            # Any script: what its data loaders yielded over the run is what it trained (a template
            # may not name the batch at all); over the whole run a one-batch look-ahead evens out.
            # Unless it reuses what it drew (``reused_batches``): then the batch it was given.
            reused = "batch_size" in self.command.used() and reused_batches(hook.samples_per_step, real)
            metrics = combine(
                Readings(hook=hook, trainer=own, effective_batch=real, loader_count_right=not reused)
            )
            if reused:
                note = (
                    f"samples credited from the batch it was given ({real:g} per step): its data loaders "
                    f"yielded {hook.samples_per_step:.3g} per step (it steps again on batches it drew)"
                )
                metrics.timing_note = "; ".join(n for n in (metrics.timing_note, note) if n)
            return metrics
        except Exception:  # the contract: a reader never takes the sweep down
            return TrialMetrics()

    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        values = self._params(baseline, params, gradient_accumulation_steps)
        return self._config_text(baseline, values, None, params)

    def baseline_steps(self, baseline: Baseline) -> int | None:
        """The full run's step count the baseline config holds (under ``config_keys``' ``steps``), if any."""
        key = self._keys(baseline).get("steps")
        value = get_dotted(baseline.data, key, None) if key else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def training_command(self, config_path: Path, winner: Winner = NO_WINNER) -> str:
        """The full run, from the folder the trials ran in. ``winner.steps``: the full run's step count
        (default: the baseline config's own); ``winner.trial_dir``: the winning trial's folder. With
        ``winner.complete``, a placeholder left unfilled is a UsageError naming it (the report prints
        no command with a hole); without, it stays as written."""
        values: dict[str, Any] = {"config": Path(config_path).resolve()}
        base = winner.baseline_or_empty(self.name)
        gas = winner.gradient_accumulation_steps
        if winner.params is not None:
            values.update(self._params(base, winner.params, gas or 1))
        elif gas is not None:
            values["gradient_accumulation_steps"] = gas
        full_steps = winner.steps if winner.steps is not None else self.baseline_steps(base)
        if full_steps is not None:
            values["steps"] = check_positive_int("steps", full_steps)
        if winner.trial_dir is not None:
            values["trial_dir"] = Path(winner.trial_dir).resolve()
        if winner.complete:
            self.command.refuse_holes(values)
        return folder_command(self.cwd, self.command.fill(values), self.command.env)
