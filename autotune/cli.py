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
from pathlib import Path
from typing import Any

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
    for add in (_add_probe, _add_plan, _add_sweep, _add_worker, _add_status, _add_report):
        add(sub)
    return parser


# --- probe -------------------------------------------------------------------------------------


def _add_probe(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "probe",
        help="list the GPUs, their memory and the VRAM tier",
        description=(
            "List the GPUs this process can use (NVML, honouring CUDA_VISIBLE_DEVICES by index or UUID), "
            "their memory and driver, and the VRAM tier of the smallest card, which decides the baseline. "
            "No driver or no GPU is a normal answer (exit 0): plan for a card with 'autotune plan --vram-gb N', "
            "or run the CPU demo with 'autotune sweep'."
        ),
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object instead of text (keys include "available", "gpus", "tier", "vram_gb")',
    )
    p.set_defaults(handler=_cmd_probe)


def _cmd_probe(args: argparse.Namespace) -> int:
    import json

    from autotune.gpu.probe import probe

    result = probe()
    print(json.dumps(result.to_json(), indent=2) if args.json else result.render_text())
    return EXIT_OK


# --- plan --------------------------------------------------------------------------------------


def _add_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="the trainer's baseline config for this card's tier, paths patched",
        description=(
            "Pick the VRAM tier of your card (from the probe, or --vram-gb), read the trainer's own shipped "
            "config for that tier from your checkout (LTX-2: t2v_lora_low_vram.yaml below 80 GB, t2v_lora.yaml "
            "from 80 GB), check its keys, patch only the paths (made absolute and checked), and write it. "
            "Cards below 32 GB are refused unless --force. "
            "Example: autotune plan --trainer-dir ~/LTX-2 --model ~/models/ltx-2.safetensors "
            "--text-encoder ~/models/gemma --data ~/data/preprocessed --output-dir ~/runs/lora"
        ),
    )
    p.add_argument(
        "--trainer",
        default="ltx2",
        help="whose baselines to plan from: ltx2 (default) or reference (the built-in reference trainer)",
    )
    p.add_argument(
        "--trainer-dir",
        type=Path,
        metavar="DIR",
        help="your LTX-2 checkout: the repo root or its packages/ltx-trainer; without it the plan names "
        "the tier and baseline only",
    )
    p.add_argument(
        "--vram-gb",
        type=_vram_gb,
        metavar="N",
        help="plan for a card of N GB instead of probing (e.g. 32, 48, 79.6, 141)",
    )
    p.add_argument(
        "--gpus",
        type=_positive_int("--gpus"),  # defined below; resolved when the parser is built
        metavar="N",
        help="number of GPUs to train on (default: the visible cards of one model, or 1 with --vram-gb)",
    )
    p.add_argument(
        "--config",
        metavar="NAME",
        help="another shipped config by name instead of the tier's (e.g. i2v_lora), or a path to your own YAML",
    )
    p.add_argument("--model", type=str, metavar="FILE", help="local model checkpoint (.safetensors, no URL)")
    p.add_argument(
        "--text-encoder",
        type=str,
        metavar="PATH",
        help="local Gemma text encoder directory (or packed .safetensors)",
    )
    p.add_argument(
        "--data",
        type=str,
        metavar="DIR",
        help="preprocessed dataset folder (with latents/, conditions/, ...)",
    )
    p.add_argument(
        "--output-dir",
        type=str,
        metavar="DIR",
        help="where training writes checkpoints (default: the shipped output_dir, made absolute)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="plan for a card below 32 GB anyway (the low-VRAM config, at your own risk)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="where to write the planned config (default: autotune-runs/plan.yaml)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object: {"tier", "vram_gb", "baseline", "config_path", "launch", "warnings", ...}',
    )
    p.set_defaults(handler=_cmd_plan)


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    from autotune.config.plan import make_plan, write_plan

    plan = make_plan(
        trainer=args.trainer,
        trainer_dir=args.trainer_dir,
        vram_gb=args.vram_gb,
        gpus=args.gpus,
        config=args.config,
        model=args.model,
        text_encoder=args.text_encoder,
        data=args.data,
        output_dir=args.output_dir,
        force=args.force,
        output=args.output,
    )
    if plan.text is not None:
        write_plan(plan)
    print(json.dumps(plan.to_json(), indent=2) if args.json else plan.render_text())
    return EXIT_OK


# --- sweep -------------------------------------------------------------------------------------


def _positive_int(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} wants a whole number, like 8; got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be at least 1; got {text!r}")
        return value

    return parse


def _duration(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        from autotune.core.units import parse_duration

        try:
            return parse_duration(text)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(f"{flag}: {exc}") from None

    return parse


def _fraction(text: str) -> float:
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


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    from autotune.core.units import format_duration
    from autotune.sweep.options import (
        DEFAULT_HEADROOM,
        DEFAULT_MAX_BATCH_SIZE,
        DEFAULT_STALL_TIMEOUT_S,
        DEFAULT_STEPS,
        DEFAULT_TRIAL_TIMEOUT_S,
    )

    p = sub.add_parser(
        "sweep",
        help="run (or resume) a sweep",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run short real trainings of candidate configs and find the fastest one that fits.\n"
            "The baseline (the trainer's own config) runs first; every trial is recorded in an Optuna\n"
            "study, so running the same command again resumes: finished trials are never run again.\n"
            "With no arguments: the demo, the built-in reference trainer on CPU with an emulated card."
        ),
        epilog=(
            "examples:\n"
            "  autotune sweep                                   the demo (a few minutes on a laptop)\n"
            "  autotune sweep --trainer ltx2 --trainer-dir ~/LTX-2 --config plan.yaml --budget 8h\n"
            "  autotune sweep --trainer ltx2 --config plan.yaml --vram-gb 48 --confirm\n"
            "  autotune sweep --cmd 'python train.py --bs {batch_size} --steps {steps}' --vram-gb 24\n"
            "Ctrl-C ends the running trial, records it as interrupted and exits 130; run the same\n"
            "command again to resume. Watch a running sweep from another shell with 'autotune status'."
        ),
    )
    p.add_argument(
        "--trainer",
        help="the trainer to sweep: ltx2, sana, command or reference (default: reference, the demo; "
        "command when --cmd is given)",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="the baseline config to start from (for ltx2: a plan from 'autotune plan')",
    )
    p.add_argument(
        "--trainer-dir",
        type=Path,
        help="the trainer's checkout (for ltx2: the LTX-2 repo or packages/ltx-trainer)",
    )
    p.add_argument(
        "--study",
        help="study name (default: TRAINER-CONFIGSTEM, 'demo' for the demo); the same name resumes",
    )
    p.add_argument(
        "--storage",
        help="SQLAlchemy database URL of the study (default: sqlite:///WORKDIR/studies.db); "
        "e.g. postgresql://user@host/autotune to share one study between machines",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        help="where the database, trial folders and report go (default: ./autotune-runs)",
    )
    p.add_argument("--vram-gb", type=_vram_gb, help="judge fit for a card of N GB instead of the one found")
    p.add_argument(
        "--steps",
        type=_positive_int("--steps"),
        help=f"optimizer steps per trial (default: {DEFAULT_STEPS}; the demo uses fewer)",
    )
    p.add_argument(
        "--budget",
        type=_duration("--budget"),
        help="stop starting trials once this much trial time is spent, counted across resumes "
        "(like 8h or 1h30m; default: no limit)",
    )
    p.add_argument(
        "--max-trials",
        type=_positive_int("--max-trials"),
        help="stop after this many trials, counted across resumes (interrupted ones are re-run, not counted)",
    )
    p.add_argument(
        "--trial-timeout",
        type=_duration("--trial-timeout"),
        help=f"end a trial that runs longer than this (default: {format_duration(DEFAULT_TRIAL_TIMEOUT_S)})",
    )
    p.add_argument(
        "--stall-timeout",
        type=_duration("--stall-timeout"),
        help=f"end a trial that prints nothing for this long (default: {format_duration(DEFAULT_STALL_TIMEOUT_S)})",
    )
    p.add_argument(
        "--headroom",
        type=_fraction,
        default=DEFAULT_HEADROOM,
        help=f"fraction of the card kept free: a config fits when its peak VRAM is at most (1 - headroom) "
        f"of the card (default: {DEFAULT_HEADROOM:g}, i.e. {DEFAULT_HEADROOM * 100:.0f}%%). Why: a short trial "
        "never sees validation, checkpoint saving or late fragmentation (an A100 80 GB LTX-2 run hit OOM "
        "only after 2000 steps), and the trainer samples its own peak only every 200 steps; peers aim "
        "at 80-95%% of the card",
    )
    p.add_argument(
        "--max-batch-size",
        type=_positive_int("--max-batch-size"),
        help=f"largest batch size tried: 1, 2, 4, ... up to it (default: {DEFAULT_MAX_BATCH_SIZE}; "
        "the dataset's size also caps it)",
    )
    p.add_argument(
        "--keep-effective-batch",
        action="store_true",
        help="never try a batch size past the plan's effective batch (batch x accumulation x GPUs); "
        "by default gradient accumulation is lowered to keep it, and larger batches are tried and flagged",
    )
    p.add_argument(
        "--allow-extra-savers",
        action="store_true",
        help="also try savers beyond the baseline (like int4/int2 quantization); they may cost quality",
    )
    p.add_argument(
        "--confirm",
        action="store_true",
        help="re-run the winner with 4x the steps before declaring it (a winner that fails gives way "
        "to the next best)",
    )
    p.add_argument(
        "--force", action="store_true", help="sweep a card below the trainer's supported size anyway"
    )
    p.add_argument(
        "--cmd",
        metavar="TEMPLATE",
        help="sweep any trainer through a command template (trainer 'command'); placeholders: the knob "
        "names, {config}, {steps}, {gradient_accumulation_steps}, {trial_dir}",
    )
    _add_scaleout_flags(p)
    p.set_defaults(handler=_cmd_sweep)


def _sweep_options(args: argparse.Namespace) -> Any:
    from autotune.sweep.options import SweepOptions
    from autotune.trainers import adapter_class, adapter_names

    templated = [name for name in adapter_names() if adapter_class(name).takes_template]
    trainer = args.trainer or (templated[0] if args.cmd else None)
    if args.cmd and trainer not in templated:
        raise UsageError(
            f"--cmd goes with --trainer {templated[0]}, not --trainer {trainer}; drop one of them"
        )
    options: dict[str, Any] = {}
    if args.trainer_dir is not None:
        options["trainer_dir"] = args.trainer_dir
    common: dict[str, Any] = {
        "config": args.config,
        "study": args.study,
        "storage": args.storage,
        "vram_gb": args.vram_gb,
        "steps": args.steps,
        "budget_s": args.budget,
        "max_trials": args.max_trials,
        "trial_timeout_s": args.trial_timeout,
        "stall_timeout_s": args.stall_timeout,
        "headroom": args.headroom,
        "max_batch_size": args.max_batch_size,
        "keep_effective_batch": args.keep_effective_batch,
        "allow_extra_savers": args.allow_extra_savers,
        "confirm": args.confirm,
        "force": args.force,
        "cmd": args.cmd,
        "trainer_options": options,
    }
    if args.workdir is not None:
        common["workdir"] = args.workdir
    if trainer is None and args.config is None:
        return SweepOptions.demo_defaults(**common)
    return SweepOptions(trainer=trainer or "reference", **{k: v for k, v in common.items()})


def _cmd_sweep(args: argparse.Namespace) -> int:
    import optuna

    from autotune.errors import SweepInterrupted
    from autotune.sweep.api import run_sweep

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # autotune prints its own progress
    opts = _sweep_options(args)
    try:
        result = run_sweep(opts, parallel=args.parallel, lease_s=args.lease)
    except SweepInterrupted as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INTERRUPTED
    out = sys.stdout
    print(f"sweep {result.study}: {result.stop_reason} after {result.trials_run} trial(s)", file=out)
    if result.best_trial is None:
        print("no config finished and fit with the headroom asked for", file=out)
    else:
        speed = f"{result.best_samples_per_s:.3g} samples/s" if result.best_samples_per_s else "?"
        gain = ""
        if result.best_samples_per_s and result.baseline_samples_per_s:
            gain = f", {result.best_samples_per_s / result.baseline_samples_per_s:.2f}x the baseline"
        print(f"best: trial {result.best_trial}: {result.best_params} at {speed}{gain}", file=out)
    md = [p for p in result.reports if p.suffix == ".md"]
    if md:
        others = ", ".join(p.name for p in result.reports if p.suffix in (".html", ".json"))
        print(f"report: {md[0]}" + (f" (beside it: {others})" if others else ""), file=out)
    if not result.reports:
        print(f"see it with: autotune status --study {result.study} --storage {result.storage}", file=out)
    return EXIT_OK


# --- worker ------------------------------------------------------------------------------------


def _add_scaleout_flags(p: argparse.ArgumentParser) -> None:
    """Flags ``sweep`` and ``worker`` share: how workers on one study find out about each other."""
    from autotune.core.units import format_duration
    from autotune.sweep.parallel import DEFAULT_LEASE_S

    if p.prog.endswith(" sweep"):
        p.add_argument(
            "--parallel",
            action="store_true",
            help="run one single-GPU trial per card of this machine at once, each pinned to its card "
            "with CUDA_VISIBLE_DEVICES (the cards must be of one model: results only compare on identical "
            "cards); other machines may join with 'autotune worker'",
        )
    p.add_argument(
        "--lease",
        type=_duration("--lease"),
        default=DEFAULT_LEASE_S,
        help="a worker that sends no heartbeat for this long is taken for dead: its trial is recorded as "
        "interrupted and run again by another (default: "
        f"{format_duration(DEFAULT_LEASE_S)}; a dead worker on the same machine is noticed at once)",
    )


def _add_worker(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "worker",
        help="join a running sweep's study from another machine (or card) and run its trials",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Join a study that 'autotune sweep' started, usually in a PostgreSQL database shared by\n"
            "several machines, and run its trials on this machine's cards: one single-GPU trial per\n"
            "card at once (or only --gpu N). The sweep's settings (trainer, config, steps, headroom,\n"
            "card) come from the study; a worker on another card model refuses to join. No candidate\n"
            "runs twice, and a dead worker's trial is run again. The worker stops when nothing is left\n"
            "to run; the sweep that started the study picks the best and writes the report."
        ),
        epilog=(
            "examples:\n"
            "  autotune worker --study ltx2-h100 --storage postgresql://autotune@db.example.org/autotune\n"
            "  autotune worker --study ltx2-h100 --storage postgresql://... --gpu 0 --wait 15m\n"
            "Ctrl-C ends the running trials, records them as interrupted (another worker runs them\n"
            "again) and exits 130."
        ),
    )
    p.add_argument(
        "--study", required=True, help="the study to join (its name, as 'autotune sweep --study' gave it)"
    )
    p.add_argument(
        "--storage",
        required=True,
        help="the study's database URL, e.g. postgresql://user@host/autotune (sqlite:///path/studies.db "
        "for workers on the same machine)",
    )
    p.add_argument(
        "--gpu",
        type=int,
        metavar="N",
        help="run on this card only (N as CUDA numbers the visible cards: 0, 1, ...); default: every "
        "visible card, one trial each",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        help="where this worker's trial folders go (default: the study's workdir if it exists on this "
        "machine, e.g. on a shared filesystem; else ./autotune-runs)",
    )
    p.add_argument(
        "--wait",
        type=_duration("--wait"),
        default=0.0,
        help="if the study does not exist yet, wait this long for its sweep to start it (like 15m; "
        "default: 0, fail at once)",
    )
    _add_scaleout_flags(p)
    p.set_defaults(handler=_cmd_worker)


def _cmd_worker(args: argparse.Namespace) -> int:
    import optuna

    from autotune.errors import SweepInterrupted
    from autotune.sweep.api import run_worker

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        result = run_worker(
            args.study, args.storage, gpu=args.gpu, workdir=args.workdir, lease_s=args.lease, wait_s=args.wait
        )
    except SweepInterrupted as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INTERRUPTED
    print(
        f"worker on study {result.study}: {result.stop_reason}; the study has {result.trials_run} finished "
        "trial(s); the sweep that started it picks the best and writes the report",
        file=sys.stdout,
    )
    return EXIT_OK


# --- status ------------------------------------------------------------------------------------


def _add_status(sub: argparse._SubParsersAction) -> None:
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
    p.set_defaults(handler=_cmd_status)


def _cmd_status(args: argparse.Namespace) -> int:
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


if __name__ == "__main__":
    raise SystemExit(main())
