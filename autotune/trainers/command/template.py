"""The command template (``--cmd``) of the command adapter: split into argv once, its placeholders
checked when it is read, and filled per argv element, never through a shell.

A template written as a launcher (``export`` lines, ``cd DIR &&``, ``NAME=value`` prefixes,
``$VAR``) is read by ``autotune.config.shellscript``, still without a shell: its exports become
the trials' environment, ``cd DIR`` their folder (``read_template``).
"""

from __future__ import annotations

import os
import shlex
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.config.shellscript import parse_launch_script, uses_shell_syntax
from autotune.errors import UsageError

KNOBS = ("quantization", "optimizer", "batch_size", "gradient_checkpointing")
EXTRA_PLACEHOLDERS = ("config", "steps", "gradient_accumulation_steps", "trial_dir")

#: Why a placeholder of the full run's command may stay unfilled (``CommandTemplate.refuse_holes``).
HOLE_REASONS = {
    "steps": "the full run's step count: the baseline config holds none and the sweep was given "
    "no --full-steps N (run the same sweep command again with --full-steps N: it resumes and "
    "records it)",
    "trial_dir": "the winning trial's folder, which the study does not name",
}


@dataclass(frozen=True)
class CommandTemplate:
    """A template read and checked: its argv, the environment and folder a launcher form sets, the
    knobs declared with ``--knob`` and the flag knobs among them (knob -> the switch's text)."""

    text: str
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    declared: tuple[str, ...]
    flags: dict[str, str]

    @classmethod
    def read(cls, template: Any, knobs: Any = None, flags: Any = None) -> CommandTemplate:
        """The template of the adapter's options (``template``, ``knobs``, ``flags``); a missing
        template, a bad option or an unknown placeholder is a ``UsageError`` before anything runs."""
        if not isinstance(template, str) or not template.strip():
            raise UsageError(
                "trainer 'command' needs a command template: --cmd 'python train.py --config {config} "
                "--batch-size {batch_size} --steps {steps}'"
            )
        argv, env, cwd = read_template(template)
        declared = _declared_names(knobs)
        read = cls(template, argv, env, cwd, declared, _flag_texts(flags, declared, argv))
        known = [*KNOBS, *declared, *EXTRA_PLACEHOLDERS]
        unknown = sorted(read.used() - set(known))
        if unknown:
            shown = ", ".join("{" + u + "}" for u in unknown)
            raise UsageError(
                f"unknown placeholder(s) {shown} in the command template; known ones: "
                f"{', '.join('{' + k + '}' for k in known)}. A knob of your own trainer is declared with "
                f"--knob NAME=v1,v2,... (values from memory-saving to memory-hungry) or --knob NAME=int:LO..HI, "
                f"e.g. --knob {unknown[0]}=VALUE1,VALUE2"
            )
        return read

    def used(self) -> set[str]:
        """The placeholders the template uses."""
        return set(placeholders(self.argv))

    def fill(self, values: Mapping[str, Any]) -> list[str]:
        """The argv with ``values`` filled in; a placeholder without a value stays as written."""
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

    def refuse_holes(self, values: Mapping[str, Any]) -> None:
        """A ``UsageError`` naming each placeholder ``values`` leaves unfilled, and why."""
        holes = [name for name in dict.fromkeys(placeholders(self.argv)) if name not in values]
        if not holes:
            return
        reasons = "; ".join(
            f"{{{name}}} needs {HOLE_REASONS.get(name, 'a value the sweep did not record')}" for name in holes
        )
        raise UsageError(f"a placeholder of the command template would stay unfilled: {reasons}")


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


def baseline_options(specs: Sequence[str], batch_sizes: Sequence[int] | None) -> dict[str, Any]:
    """The adapter's ``baseline`` option from ``--baseline NAME=VALUE`` specs (values parsed as
    ``--knob`` lists are), and ``default_batch``: the batch a baseline starts at when nothing gives
    one, the smallest of ``--batch-sizes`` (which says "only these"), not 1."""
    from autotune.core.knobflag import parse_value

    values: dict[str, Any] = {}
    for spec in specs:
        name, eq, text = spec.partition("=")
        name, text = name.strip(), text.strip()
        if not eq or not name or not text:
            raise UsageError(f"--baseline {spec!r}: write NAME=VALUE, e.g. --baseline batch_size=64")
        if name in values:
            raise UsageError(f"--baseline {name}=... is given twice; keep one")
        values[name] = parse_value(text)
    out: dict[str, Any] = {"baseline": values} if values else {}
    if batch_sizes:
        out["default_batch"] = min(batch_sizes)
    return out
