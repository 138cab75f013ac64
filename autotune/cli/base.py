"""What every command module shares: exit codes, the parser class, the flag value types.

The value types turn a flag's text into a number or a duration, or a one-line
message argparse shows as a usage error (exit 2). Nothing heavy is imported here:
building the parser must stay fast (``autotune --help``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from autotune.errors import UsageError

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

Handler = Callable[[argparse.Namespace], int]


class Parser(argparse.ArgumentParser):
    """argparse that raises ``UsageError`` instead of exiting, so all errors look alike; an
    argument no command takes is reported by the command it was given to (``autotune plan``, whose
    help lists what it takes), with that command's word for a flag it is often given by mistake
    (``unknown_hints``: flag -> what to run instead)."""

    unknown_hints: dict[str, str]

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = self._chosen_command(parsed) or self
            hints = getattr(owner, "unknown_hints", {})
            said = [hints[f] for f in hints if any(x == f or x.startswith(f + "=") for x in extras)]
            owner.error(f"unrecognized arguments: {' '.join(extras)}" + "".join(f"; {h}" for h in said))
        return parsed

    def _chosen_command(self, parsed: argparse.Namespace) -> Parser | None:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and action.dest != argparse.SUPPRESS:
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
                return chosen if isinstance(chosen, Parser) else None
        return None


def gb_amount(flag: str, wants: str = "a number of GB, like 64 or 125.5") -> Callable[[str], float]:
    """A positive number of GB for ``flag`` (``--vram-gb 48``, ``--host-ram-gb 64``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} wants {wants}; got {text!r}") from None
        if not value > 0 or value == float("inf"):  # NaN is not > 0 either
            raise argparse.ArgumentTypeError(f"{flag} must be a positive number of GB; got {text!r}")
        return value

    return parse


vram_gb = gb_amount("--vram-gb", "the card's memory in GB as a number, like 48 or 79.6")


def positive_int(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} wants a whole number, like 8; got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be at least 1; got {text!r}")
        return value

    return parse


def duration(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        from autotune.core.units import parse_duration

        try:
            return parse_duration(text)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(f"{flag}: {exc}") from None

    return parse


def fraction(text: str) -> float:
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--headroom wants a fraction of the card like 0.1 (or 10%); got {text!r}"
        ) from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(
            f"--headroom must be at least 0 and below 1 (a fraction of the card kept free); got {text!r}"
        )
    return value


class TrainerFlag(argparse.Action):
    """``--trainer NAME``: stores the name; its help lists the registry's trainers, one line each
    (``plans``: only those ``autotune plan`` knows), built when the help is shown."""

    def __init__(self, *args: object, plans: bool = False, **kwargs: object) -> None:
        self._plans = plans
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    @property
    def help(self) -> str:
        from autotune.trainers.registry import trainer_help

        return f"{self._head}. One of: {trainer_help(plans=self._plans)}".replace("%", "%%")

    @help.setter
    def help(self, value: str | None) -> None:
        self._head = value or "the trainer"

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option: object = None,
    ) -> None:
        setattr(namespace, self.dest, values)
