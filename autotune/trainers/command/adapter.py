"""Any trainer, from a command template (``--cmd``).

The template is split into argv once, with ``shlex``, and the placeholders are
filled in per argv element: nothing goes through a shell, so ``x; rm -rf ~`` in a
template or a value stays a literal argument. Placeholders: the study's params
(the knob names), ``{config}`` (the rendered YAML), ``{steps}``,
``{gradient_accumulation_steps}``, ``{trial_dir}``; ``{{``/``}}`` are literal braces.
An unknown placeholder is a ``UsageError`` when the adapter is made, before anything runs.
A template written as a launcher (``export`` lines, ``cd DIR &&``, ``NAME=value`` prefixes,
``$VAR``) is read by ``autotune.config.shellscript`` instead, still without a shell: its
exports become the trials' environment, ``cd DIR`` their folder (``read_template``).

``{config}``: the baseline config (``--config``) with the knobs written into the keys
named by ``config_keys`` (by default LTX-2's keys when the file has an
``optimization:`` section), or, with no baseline config, a flat YAML of the params.
Metrics: ``AUTOTUNE_METRICS_FILE`` first, then the LTX-2 statistics block and Step lines, the
hook, and the formats trainers print (``readers.chain``: Hugging Face ``Trainer`` log dicts,
``iter N: loss X, time Yms`` lines, the training tqdm bar, Lightning's bar).

Knobs: only those the command receives are swept (``knobs_in_play``): a ``{placeholder}`` of
the template, or a key the ``{config}`` file holds. Knobs declared with ``--knob NAME=...``
(the ``knobs`` option) are placeholders too, and config keys where the baseline config has
them; an unknown placeholder's error says how to declare one.
"""

from __future__ import annotations

import os
import shlex
import string
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import yaml

from autotune.config.shellscript import parse_launch_script, uses_shell_syntax
from autotune.config.yamlconf import RoundTripConfig, read_config_text
from autotune.core.metrics import Readings, TrialMetrics
from autotune.core.space import from_study_value, to_study_value
from autotune.core.verdict import combine
from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigError, UsageError
from autotune.execution.launch import env_prefix
from autotune.trainers.base import Baseline, Params, TrainerAdapter, TrainerTraits, TrialLaunch, TrialRun
from autotune.trainers.kit.common import (
    check_params,
    check_positive_int,
    effective_batch_of,
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

KNOBS = ("quantization", "optimizer", "batch_size", "gradient_checkpointing")
EXTRA_PLACEHOLDERS = ("config", "steps", "gradient_accumulation_steps", "trial_dir")
LTX2_CONFIG_KEYS = {**KNOB_KEYS, "gradient_accumulation_steps": GRAD_ACCUM_KEY, "steps": STEPS_KEY}


def placeholders(argv: list[str]) -> list[str]:
    """The ``{name}`` fields used in ``argv`` (a bad brace is a UsageError naming the element)."""
    names: list[str] = []
    for element in argv:
        try:
            parsed = list(string.Formatter().parse(element))
        except ValueError as exc:
            raise UsageError(
                f"command template element {element!r}: {exc}; write literal braces as {{{{ and }}}}"
            ) from None
        for _, field, _, _ in parsed:
            if field is None:
                continue
            if not field.isidentifier():
                raise UsageError(
                    f"command template element {element!r}: {{{field}}} is not a placeholder name"
                )
            names.append(field)
    return names


class _Values(dict[str, str]):
    """Missing placeholders stay as written (only in the printed full-run command)."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    return str(value)


def _declared_names(option: Any) -> tuple[str, ...]:
    """The ``knobs`` option: names of knobs declared with ``--knob`` (the sweep passes them)."""
    if option is None:
        return ()
    if isinstance(option, str):
        option = [option]
    names = tuple(option) if isinstance(option, (list, tuple)) else None
    if names is None or not all(isinstance(n, str) and n for n in names):
        raise UsageError(f"the command adapter's 'knobs' option must list knob names, got {option!r}")
    clash = sorted(set(names) & {*KNOBS, *EXTRA_PLACEHOLDERS})
    if clash:
        raise UsageError(
            f"--knob {clash[0]}: that name is a built-in placeholder; give your knob another name"
        )
    return names


def _lone_placeholder(element: str) -> str | None:
    """The name when ``element`` is exactly one ``{name}`` and nothing else."""
    if element.startswith("{") and element.endswith("}") and element[1:-1].isidentifier():
        return element[1:-1]
    return None


def _flag_texts(option: Any, declared: Sequence[str], argv: Sequence[str]) -> dict[str, str]:
    """The ``flags`` option: declared flag knobs (``--knob NAME=flag``) -> the switch's text. Each
    must stand alone as an argument of the template, so that false can drop it."""
    if option is None:
        return {}
    if not isinstance(option, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in option.items()
    ):
        raise UsageError(f"the command adapter's 'flags' option must map knob names to flags, got {option!r}")
    for name in option:
        if name not in declared:
            raise UsageError(f"flag knob {name!r} is not among the declared knobs ({', '.join(declared)})")
        inside = [e for e in argv if "{" + name + "}" in e and _lone_placeholder(e) != name]
        if inside:
            raise UsageError(
                f"--knob {name}=flag: {{{name}}} is part of the template argument {inside[0]!r}; a flag "
                f"knob is a whole argument (it becomes the flag or nothing): write it as a separate word "
                f"{{{name}}}"
            )
    return dict(option)


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
    true and no argument at all when false)."""

    name: ClassVar[str] = "command"
    knob_file: ClassVar[str] = "command.yaml"
    traits: ClassVar[TrainerTraits] = TrainerTraits(
        label="your trainer",
        takes_template=True,
        takes_hook=True,
    )

    def __init__(self, **options: Any) -> None:
        take_options(options, self.name, ("template", "cwd", "config_keys", "hook", "knobs", "flags"))
        template = options.get("template")
        if not isinstance(template, str) or not template.strip():
            raise UsageError(
                "trainer 'command' needs a command template: --cmd 'python train.py --config {config} "
                "--batch-size {batch_size} --steps {steps}'"
            )
        self.argv, self.script_env, script_cwd = read_template(template)
        self.template = template
        self.declared = _declared_names(options.get("knobs"))
        self.flags = _flag_texts(options.get("flags"), self.declared, self.argv)
        known = [*KNOBS, *self.declared, *EXTRA_PLACEHOLDERS]
        unknown = sorted(set(placeholders(self.argv)) - set(known))
        if unknown:
            shown = ", ".join("{" + u + "}" for u in unknown)
            raise UsageError(
                f"unknown placeholder(s) {shown} in the command template; known ones: "
                f"{', '.join('{' + k + '}' for k in known)}. A knob of your own trainer is declared with "
                f"--knob NAME=v1,v2,... (values from memory-saving to memory-hungry) or --knob NAME=int:LO..HI, "
                f"e.g. --knob {unknown[0]}=VALUE1,VALUE2"
            )
        cwd = options.get("cwd")
        # The cwd option wins (a report rebuilds the adapter with the folder the trials ran in).
        self.cwd = Path(cwd or script_cwd or ".").expanduser().resolve()
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

    def knob_location(self, baseline: Baseline, param: str) -> str:
        return f"{baseline.path or '<config>'}: {self._keys(baseline).get(param, param)}"

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
        used = set(placeholders(self.argv))
        via_config: set[str] = set()
        if "config" in used and not baseline.text:
            return list(names)
        if "config" in used:
            keys = self._keys(baseline)
            explicit = set(self.config_keys or ())
            via_config = {n for n, key in keys.items() if n in explicit or _has_key(baseline.data, key)}
        return [n for n in names if n in used or n in via_config]

    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        """Values the baseline config holds under ``config_keys``; else the memory-saving end."""
        out: dict[str, Any] = {
            "quantization": "int8-quanto",
            "optimizer": "adamw8bit",
            "batch_size": 1,
            "gradient_checkpointing": True,
            "gradient_accumulation_steps": 1,
        }
        missing = object()
        for param, key in self._keys(baseline).items():
            value = get_dotted(baseline.data, key, missing)
            if param == "steps" or value is missing:
                continue
            out[param] = to_study_value(value) if param in ("quantization", *self.declared) else value
        return out

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

    def _fill(self, values: Mapping[str, Any]) -> list[str]:
        filled = _Values({k: _text(v) for k, v in values.items()})
        out: list[str] = []
        for element in self.argv:
            flag = _lone_placeholder(element)
            if flag in self.flags and flag in values:  # a switch: its text when true, nothing when false
                if values[flag] is True:
                    out.append(self.flags[flag])
                continue
            out.append(element.format_map(filled))
        return out

    def steps_warning(self, baseline: Baseline, steps: int) -> str | None:
        """No ``{steps}`` in the template and no steps key in the ``{config}`` it passes: each
        trial runs the script's own length. Said before the first trial, not found out after."""
        used = set(placeholders(self.argv))
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
        argv = self._fill({**values, "config": config_path, "steps": run.steps, "trial_dir": run.trial_dir})
        env = {"PYTHONUNBUFFERED": "1", "COLUMNS": "250", **self.script_env}
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
            return combine(Readings(hook=hook, trainer=own, effective_batch=real, loader_count_right=True))
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

    def training_command(
        self,
        config_path: Path,
        *,
        baseline: Baseline | None = None,
        params: Params | None = None,
        gradient_accumulation_steps: int | None = None,
        steps: int | None = None,
        trial_dir: Path | None = None,
        complete: bool = False,
    ) -> str:
        """The full run, from the folder the trials ran in. ``steps``: the full run's step count
        (default: the baseline config's own); ``trial_dir``: the winning trial's folder. With
        ``complete``, a placeholder left unfilled is a UsageError naming it (the report prints no
        command with a hole); without, it stays as written."""
        values: dict[str, Any] = {"config": Path(config_path).resolve()}
        base = baseline or Baseline(trainer=self.name, text="", data={})
        if params is not None:
            values.update(self._params(base, params, gradient_accumulation_steps or 1))
        elif gradient_accumulation_steps is not None:
            values["gradient_accumulation_steps"] = gradient_accumulation_steps
        full_steps = steps if steps is not None else self.baseline_steps(base)
        if full_steps is not None:
            values["steps"] = check_positive_int("steps", full_steps)
        if trial_dir is not None:
            values["trial_dir"] = Path(trial_dir).resolve()
        if complete:
            self._refuse_holes(values)
        env = env_prefix(self.script_env)
        return (
            f"cd {shlex.quote(str(self.cwd))} && {env + ' ' if env else ''}{shlex.join(self._fill(values))}"
        )

    def _refuse_holes(self, values: Mapping[str, Any]) -> None:
        holes = [name for name in dict.fromkeys(placeholders(self.argv)) if name not in values]
        if not holes:
            return
        why = {
            "steps": "the full run's step count: the baseline config holds none and the sweep was given "
            "no --full-steps N (run the same sweep command again with --full-steps N: it resumes and "
            "records it)",
            "trial_dir": "the winning trial's folder, which the study does not name",
        }
        reasons = "; ".join(
            f"{{{name}}} needs {why.get(name, 'a value the sweep did not record')}" for name in holes
        )
        raise UsageError(f"a placeholder of the command template would stay unfilled: {reasons}")


def read_template(template: str) -> tuple[list[str], dict[str, str], str | None]:
    """(argv, env, cwd) of a template. A plain command line is split with ``shlex`` and nothing
    else (``x;y`` stays one argument); one written as a launcher (``export`` lines, ``cd DIR &&``,
    ``NAME=value`` prefixes, ``$VAR``) is read by ``config.shellscript``: its exports become the
    trials' environment and ``$VAR`` is expanded, never passed on literally."""
    if uses_shell_syntax(template):
        script = parse_launch_script(template, "--cmd", os.environ)
        return script.argv, script.env, script.cwd
    try:
        return shlex.split(template), {}, None
    except ValueError as exc:
        raise UsageError(f"cannot split the command template {template!r}: {exc}") from None
