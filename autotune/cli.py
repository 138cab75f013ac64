"""The ``autotune`` command line: a thin layer over the library.

Each subcommand has one ``_add_<name>`` function that declares its flags and one
``_cmd_<name>`` function that calls into the library. Errors become one
``error: ...`` line (exit 1 at run time, 2 for bad input); ``--debug`` shows the
traceback; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence

from autotune import __version__
from autotune.errors import AutotuneError, UsageError

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse that raises ``UsageError`` instead of exiting, so all errors look alike."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


def _vram_gb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--vram-gb wants the card's memory in GB as a number, like 48 or 79.6; got {text!r}"
        ) from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"--vram-gb must be a positive number of GB; got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="autotune",
        description=(
            "Find the fastest training config that fits your GPU by running short real trainings. "
            "Start with 'autotune probe', then 'autotune plan', then 'autotune sweep'; "
            "'autotune sweep' with no arguments runs a demo on the built-in reference trainer."
        ),
    )
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in (_add_probe, _add_plan, _add_sweep, _add_status, _add_report):
        add(sub)
    return parser


# --- probe -------------------------------------------------------------------------------------


def _add_probe(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="list the GPUs, their memory and the VRAM tier")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(handler=_cmd_probe)


def _cmd_probe(args: argparse.Namespace) -> int:
    raise UsageError("'autotune probe' is not implemented yet")


# --- plan --------------------------------------------------------------------------------------


def _add_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="the trainer's baseline config for this card's tier, paths patched")
    p.add_argument("--trainer", default="ltx2")
    p.add_argument("--trainer-dir")
    p.add_argument("--vram-gb", type=_vram_gb)
    p.add_argument("-o", "--output")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_plan)


def _cmd_plan(args: argparse.Namespace) -> int:
    raise UsageError("'autotune plan' is not implemented yet")


# --- sweep -------------------------------------------------------------------------------------


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run (or resume) a sweep")
    p.add_argument("--trainer")
    p.add_argument("--config")
    p.add_argument("--study")
    p.add_argument("--storage")
    p.add_argument("--workdir")
    p.add_argument("--vram-gb", type=_vram_gb)
    p.set_defaults(handler=_cmd_sweep)


def _cmd_sweep(args: argparse.Namespace) -> int:
    raise UsageError("'autotune sweep' is not implemented yet")


# --- status ------------------------------------------------------------------------------------


def _add_status(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="progress of a running or finished sweep")
    p.add_argument("--study")
    p.add_argument("--storage")
    p.set_defaults(handler=_cmd_status)


def _cmd_status(args: argparse.Namespace) -> int:
    raise UsageError("'autotune status' is not implemented yet")


# --- report ------------------------------------------------------------------------------------


REPORT_FORMATS_CLI = ("md", "html", "json")  # autotune.report.REPORT_FORMATS, without importing optuna


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="the best-config report of a sweep (Markdown, HTML or JSON), and the winning config",
        description=(
            "Read a sweep's study (read-only; it may still be running) and report what won, its "
            "speed-up over the baseline, why every other trial lost, and the command to launch the "
            "full training. Examples: 'autotune report', 'autotune report --format html -o report.html', "
            "'autotune report --write-config best.yaml'."
        ),
    )
    p.add_argument(
        "--study",
        metavar="NAME",
        help="the study to report on; may be left out when the storage holds only one",
    )
    p.add_argument(
        "--storage",
        metavar="URL",
        help=(
            "the study database (default: sqlite:///WORKDIR/studies.db, i.e. "
            "sqlite:///./autotune-runs/studies.db); any SQLAlchemy URL, e.g. postgresql://user@host/db"
        ),
    )
    p.add_argument(
        "--workdir",
        metavar="DIR",
        help="the sweep's folder with its trial folders (default: the one the study recorded, else ./autotune-runs)",
    )
    p.add_argument(
        "--format",
        choices=REPORT_FORMATS_CLI,
        default="md",
        help="md (default: reads well in a terminal and on GitHub), html (one self-contained page with "
        "charts), or json (for scripts)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument(
        "--write-config",
        metavar="FILE",
        help="also write the winning config in the trainer's own format to FILE (the baseline file, "
        "comments kept, with only the winning knobs changed); the launch command then names FILE",
    )
    p.set_defaults(handler=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune import report as rep

    workdir = Path(args.workdir) if args.workdir else None
    storage = args.storage or rep.default_storage(workdir)
    study = rep.open_study(storage, args.study)
    config_out = Path(args.write_config) if args.write_config else None
    report = rep.build_report(study, workdir=workdir, best_config_path=config_out)
    config_text = rep.winning_config(report, rep.settings_hash(study)) if config_out else None
    text = rep.RENDERERS[args.format](report)
    if config_out is not None and config_text is not None:
        rep.write_text_atomic(config_out, config_text)
        print(f"wrote the winning config to {config_out}", file=sys.stderr)
    if args.output:
        rep.write_text_atomic(Path(args.output), text)
        print(f"wrote the {args.format} report to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


# --- entry point -------------------------------------------------------------------------------


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


if __name__ == "__main__":
    raise SystemExit(main())
