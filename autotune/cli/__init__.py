"""The ``autotune`` command line: a thin layer over the library.

Each command group has a module (``probe_plan``, ``sweep_worker``, ``status_report``)
with one ``add_<name>`` function that declares a subcommand's flags and one
``cmd_<name>`` function that calls into the library and prints; ``parser`` puts the
subparsers together and ``base`` holds what they share. Errors become one
``error: ...`` line (exit 1 at run time, 2 for bad input); ``--debug`` shows the
traceback; Ctrl-C exits 130.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence

from autotune.cli.base import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Handler
from autotune.cli.parser import build_parser
from autotune.cli.status_report import REPORT_FORMATS_CLI
from autotune.cli.sweep_worker import sweep_options
from autotune.errors import AutotuneError

#: The name tests and ``scripts/bench_sweep.py`` know it by.
_sweep_options = sweep_options

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "REPORT_FORMATS_CLI",
    "Handler",
    "build_parser",
    "main",
    "sweep_options",
]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        handler: Handler | None = getattr(args, "handler", None)
        if handler is None:
            build_parser().print_help()
            return EXIT_USAGE
        return handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `autotune probe | head`: the reader left; not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except AutotuneError as exc:
        if debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # a bug: say so, in one line unless --debug
        if debug:
            traceback.print_exc()
        print(
            f"error: internal error: {type(exc).__name__}: {exc} (run again with --debug for details)",
            file=sys.stderr,
        )
        return EXIT_FAILURE
