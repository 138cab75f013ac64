"""The argument parser: the top-level options and one subparser per command.

Each command module declares its own flags (``add_<name>``) and names its handler
(``cmd_<name>``); this module only puts them together. It imports no Optuna, database or
report code, so ``autotune --help`` answers at once.
"""

from __future__ import annotations

import argparse

from autotune import __version__
from autotune.cli.base import Parser
from autotune.cli.probe_plan import add_plan, add_probe
from autotune.cli.status_report import add_report, add_status
from autotune.cli.sweep_worker import add_sweep, add_worker


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="autotune",
        description=(
            "Find the fastest training config that fits your GPU by running short real trainings. "
            "Start with 'autotune probe', then 'autotune plan', then 'autotune sweep'; "
            "'autotune sweep' with no arguments runs a demo on the built-in reference trainer."
        ),
    )
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for add in (add_probe, add_plan, add_sweep, add_worker, add_status, add_report):
        add(sub)
    return parser
