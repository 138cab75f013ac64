"""Editing a command line's ``--flag value`` / ``--flag=value`` / ``--switch`` arguments as argparse reads them."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.errors import ConfigError


def _matches(token: str, flag: str) -> bool:
    return token == flag or token.startswith(flag + "=")


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag value`` or ``--flag=value`` (the last one wins, as in argparse)."""
    value = None
    for i, token in enumerate(args):
        if token == flag and i + 1 < len(args):
            value = args[i + 1]
        elif token.startswith(flag + "="):
            value = token.split("=", 1)[1]
    return value


def has_flag(args: Sequence[str], flag: str) -> bool:
    return any(token == flag for token in args)


def set_value_flag(args: list[str], flag: str, value: str) -> list[str]:
    """Replace the first ``flag`` in place (same style), drop repeats, append it if absent."""
    out: list[str] = []
    done = False
    i = 0
    while i < len(args):
        token = args[i]
        if _matches(token, flag):
            separate = token == flag
            if not done:
                out += [flag, value] if separate else [f"{flag}={value}"]
                done = True
            i += 2 if separate and i + 1 < len(args) and not args[i + 1].startswith("--") else 1
            continue
        out.append(token)
        i += 1
    if not done:
        out += [flag, value]
    return out


def drop_value_flag(args: list[str], flag: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        if _matches(args[i], flag):
            i += 2 if args[i] == flag and i + 1 < len(args) and not args[i + 1].startswith("--") else 1
            continue
        out.append(args[i])
        i += 1
    return out


def set_bool_flag(args: list[str], flag: str, on: bool) -> list[str]:
    present = has_flag(args, flag)
    if on:
        return args if present else [*args, flag]
    return [a for a in args if a != flag]


def drop_flags(args: list[str], value_flags: Sequence[str], bool_flags: Sequence[str]) -> list[str]:
    """``args`` without each of ``value_flags`` (and its value) and each of ``bool_flags``: what a
    trial's short run leaves out of the baseline command (sampling, saves, resumes, uploads)."""
    for flag in value_flags:
        args = drop_value_flag(args, flag)
    for flag in bool_flags:
        args = set_bool_flag(args, flag, False)
    return args


def flag_number(args: Sequence[str], flag: str, default: int) -> int | str:
    """A whole-number flag's value in a baseline command, or its text as written when it is not
    one (``check_baseline_values`` then names the file, the flag and the value)."""
    value = flag_value(args, flag)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return value


def int_flag(args: Sequence[str], flag: str, default: int) -> int:
    """A whole-number flag's value in the command (``default`` when absent)."""
    value = flag_value(args, flag)
    try:
        return int(value) if value is not None else default
    except ValueError:
        raise ConfigError(f"{flag} must be a whole number; the baseline command has {value!r}") from None
