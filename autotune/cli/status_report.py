"""``autotune status`` and ``autotune report``: read a sweep's study and show it.

The flags and their help texts, and handlers that call ``autotune.report`` (imported
inside them: it loads Optuna) and print or write what it returns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.cli.base import EXIT_OK

# --- status ------------------------------------------------------------------------------------


def add_status(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="progress of a running or finished sweep",
        description="Show a sweep's progress. Safe to run from another shell while the sweep runs.",
        epilog="example: autotune status --workdir autotune-runs --study demo",
    )
    p.add_argument("--study", help="study name (default: the only study in the database)")
    p.add_argument("--storage", help="database URL (default: sqlite:///WORKDIR/studies.db)")
    p.add_argument("--workdir", type=Path, help="the sweep's workdir (default: ./autotune-runs)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(handler=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    import json

    import optuna

    from autotune.report import status

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    info = status.collect(storage=args.storage, workdir=args.workdir, study=args.study)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        print(status.render(info))
    return EXIT_OK


# --- report ------------------------------------------------------------------------------------


REPORT_FORMATS_CLI = ("md", "html", "json")  # autotune.report.build.REPORT_FORMATS, without importing optuna


def add_report(sub: argparse._SubParsersAction) -> None:
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
    p.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.report import build as rep

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
