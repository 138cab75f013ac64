"""``autotune sweep`` and ``autotune worker``: run a sweep, or join one from another machine.

The flags and their help texts, the flags resolved into ``SweepOptions``, and handlers
that call ``autotune.sweep.api`` and print the result. Optuna and the sweep engine are
imported inside the handlers only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from autotune.cli.base import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    TrainerFlag,
    duration,
    fraction,
    gb_amount,
    positive_int,
    vram_gb,
)
from autotune.errors import UsageError


def batch_list(text: str) -> tuple[int, ...]:
    """``--batch-sizes 1,2,4,8``: positive integers, comma-separated."""
    parse = positive_int("--batch-sizes")
    parts = [x.strip() for x in text.split(",") if x.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"--batch-sizes wants sizes like 1,2,4,8; got {text!r}")
    return tuple(sorted({parse(x) for x in parts}))


def add_sweep(sub: argparse._SubParsersAction) -> None:
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
        action=TrainerFlag,
        metavar="NAME",
        help="the trainer to sweep (default: reference, the demo; command when --cmd is given)",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="the baseline config to start from (for ltx2: a plan from 'autotune plan'; for sana: your "
        "launcher script, export lines and $VARs included, or a YAML)",
    )
    p.add_argument(
        "--trainer-dir",
        type=Path,
        help="the trainer's checkout (for ltx2: the LTX-2 repo or packages/ltx-trainer)",
    )
    p.add_argument(
        "--trainer-python",
        type=Path,
        metavar="PATH",
        help="the Python of the environment the trainer is installed in, for a trainer installed "
        "without uv (ltx2, sana): trials run 'PATH scripts/train.py CONFIG', several GPUs "
        "'PATH -m accelerate.commands.launch ...' (default for ltx2: uv run python / uv run "
        "accelerate launch; for sana: the baseline's own launcher). Checked before any trial",
    )
    p.add_argument(
        "--no-validation-in-trials",
        action="store_true",
        help="(ltx2) trials skip the baseline's validation pass; by default each trial runs one, with "
        "the baseline's resolution, frames, prompts and text-encoder load (inference steps cut "
        "to 2), and judges its peak too. The report then warns that validation was not measured",
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
    p.add_argument("--vram-gb", type=vram_gb, help="judge fit for a card of N GB instead of the one found")
    p.add_argument(
        "--steps",
        type=positive_int("--steps"),
        help=f"optimizer steps per trial (default: {DEFAULT_STEPS}; the demo uses fewer)",
    )
    p.add_argument(
        "--full-steps",
        type=positive_int("--full-steps"),
        metavar="N",
        help="optimizer steps of the full training, for the report's launch command: it fills --cmd's "
        "{steps} (default: the baseline config's own step count; with neither, the report prints no "
        "command and says why)",
    )
    p.add_argument(
        "--budget",
        type=duration("--budget"),
        help="stop starting trials once this much trial time is spent, counted across resumes "
        "(like 8h or 1h30m; default: no limit)",
    )
    p.add_argument(
        "--max-trials",
        type=positive_int("--max-trials"),
        help="stop after this many trials, counted across resumes (interrupted ones are re-run, not counted)",
    )
    p.add_argument(
        "--trial-timeout",
        type=duration("--trial-timeout"),
        help=f"end a trial that runs longer than this (default: {format_duration(DEFAULT_TRIAL_TIMEOUT_S)})",
    )
    p.add_argument(
        "--stall-timeout",
        type=duration("--stall-timeout"),
        help=f"end a trial that prints nothing for this long (default: {format_duration(DEFAULT_STALL_TIMEOUT_S)})",
    )
    p.add_argument(
        "--headroom",
        type=fraction,
        default=DEFAULT_HEADROOM,
        help=f"fraction of the card kept free: a config fits when its peak VRAM is at most (1 - headroom) "
        f"of the card (default: {DEFAULT_HEADROOM:g}, i.e. {DEFAULT_HEADROOM * 100:.0f}%%). Why: a short trial "
        "never sees validation, checkpoint saving or late fragmentation (an A100 80 GB LTX-2 run hit OOM "
        "only after 2000 steps), and the trainer samples its own peak only every 200 steps; peers aim "
        "at 80-95%% of the card",
    )
    p.add_argument(
        "--host-ram-gb",
        type=gb_amount("--host-ram-gb"),
        help="host RAM the trials may use, in GB (default: this machine's). Block swap and offload "
        "move weights into host RAM: a trial whose processes' RSS peaks over (1 - headroom) of this "
        "does not fit, one that passes all of it is ended as host_oom before the kernel's OOM killer "
        "strikes, and either rules out every config with at least as much offload",
    )
    p.add_argument(
        "--max-batch-size",
        type=positive_int("--max-batch-size"),
        help=f"largest batch size tried (default: {DEFAULT_MAX_BATCH_SIZE}; the dataset's size also caps it). "
        "Every integer up to it may be tried (past 64 they double): a ladder 1, 2, 4, ... brackets each "
        "config's memory limit, "
        "the measured memory line predicts the largest batch that fits, and runs verify it and its +1",
    )
    p.add_argument(
        "--batch-sizes",
        type=batch_list,
        metavar="B1,B2,...",
        help="only these batch sizes, e.g. 1,2,4,8 (a ladder, as before integers were searched); "
        "each is per GPU, and those past --max-batch-size are dropped",
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
        help="also try savers that cost quality beyond the baseline's: a fidelity knob's values below the "
        "baseline's (any quantization on an unquantized baseline, 8-bit AdamW on an AdamW one, int4/int2 "
        "quantization); without it the sweep only relaxes the baseline's own savers and the report names "
        "what it held back. Gradient checkpointing, batch size and offload are searched either way: they "
        "cost speed or host RAM, not quality",
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
        "names, {config}, {steps}, {gradient_accumulation_steps}, {trial_dir}. A launcher script works "
        'too (--cmd "$(cat launch.sh)"): its export lines, cd DIR && and $VARs are read without a '
        "shell, the exports become the trials' environment",
    )
    p.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="NAME=VALUES",
        help="only the knobs a --cmd template receives are swept: {quantization}, {optimizer}, "
        "{batch_size}, {gradient_checkpointing} where it names them (or its {config} file holds their "
        "keys); --knob declares one of your trainer's own (repeatable): NAME=v1,v2,... lists its values from "
        "memory-saving to memory-hungry (yes/no/true/false are booleans, whole numbers ints); "
        "NAME=int:LO..HI is every integer from LO to HI, a larger one needing more memory (int:HI..LO when "
        "a larger one needs less); NAME=count:MAX is a count offloaded to host RAM (blocks swapped, "
        "MAX..0) and NAME=fraction[:STEP] a share offloaded (1.0..0.0): their coarse grid runs first, is "
        "refined near the best, and more of either costs host RAM (--host-ram-gb); NAME=flag is a switch "
        "with no value (store_true): {NAME} is --NAME (or the text of NAME=flag:--the-flag) or no argument "
        "at all, present first (it saves memory), absent first with NAME=flag:--the-flag:costs (a flag that "
        "costs memory, like --ema). Every kind holds at most 256 values. Use it as {NAME} in --cmd, or as key "
        "NAME (dotted for nested) in --config, which also gives the baseline's value (else the first)",
    )
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="with --cmd: a value your command runs with today (repeatable), e.g. --baseline "
        "batch_size=64 for a script whose BatchNorm needs more than one sample; the baseline runs "
        "first with it and the sweep relaxes from there. A knob given neither here nor in --config "
        "starts at its memory-saving end (batch: the smallest of --batch-sizes, else 1)",
    )
    p.add_argument(
        "--no-hook",
        dest="hook",
        action="store_false",
        help="do not inject the trial-side hook into the trials (on by default for every PyTorch trainer: "
        "it goes first on PYTHONPATH, keeping yours, and records per optimizer step the time, CUDA's peak "
        "memory, the loss backward() saw (NaN/inf: the trial is 'nan') and the data loader's real batch; "
        "with --vram-gb it emulates that card: live tensors counted on CPU, or the process capped with "
        "torch.cuda.set_per_process_memory_fraction on a larger GPU). Without it and without a GPU, "
        "nothing measures or limits a trial's memory",
    )
    add_scaleout_flags(p)
    p.set_defaults(handler=cmd_sweep)


def sweep_options(args: argparse.Namespace) -> Any:
    from autotune.sweep.options import SweepOptions
    from autotune.trainers import adapter_class, adapter_names, registry

    trainer = args.trainer or (registry.CMD_TRAINER if args.cmd else None)
    if args.cmd and (trainer not in adapter_names() or not adapter_class(trainer).traits.takes_template):
        raise UsageError(
            f"--cmd goes with --trainer {registry.CMD_TRAINER}, not --trainer {trainer}; drop one of them"
        )
    options: dict[str, Any] = {}
    if args.trainer_dir is not None:
        options["trainer_dir"] = args.trainer_dir
    if args.trainer_python is not None:
        options["launcher"] = [trainer_python(args.trainer_python, trainer)]
    if getattr(args, "no_validation_in_trials", False):
        options["trial_validation"] = no_trial_validation(trainer)
    options.update(template_baseline(args, trainer))
    common: dict[str, Any] = {
        "config": args.config,
        "study": args.study,
        "storage": args.storage,
        "vram_gb": args.vram_gb,
        "steps": args.steps,
        "full_steps": args.full_steps,
        "budget_s": args.budget,
        "max_trials": args.max_trials,
        "trial_timeout_s": args.trial_timeout,
        "stall_timeout_s": args.stall_timeout,
        "headroom": args.headroom,
        "host_ram_gb": args.host_ram_gb,
        "max_batch_size": args.max_batch_size,
        "batch_sizes": args.batch_sizes,
        "keep_effective_batch": args.keep_effective_batch,
        "allow_extra_savers": args.allow_extra_savers,
        "confirm": args.confirm,
        "force": args.force,
        "cmd": args.cmd,
        "hook": args.hook,
        "knobs": list(args.knob or []),
        "trainer_options": options,
    }
    if args.workdir is not None:
        common["workdir"] = args.workdir
    if trainer is None and args.config is None:
        return SweepOptions.demo_defaults(**common)
    return SweepOptions(trainer=trainer or "reference", **{k: v for k, v in common.items()})


def template_baseline(args: argparse.Namespace, trainer: str | None) -> dict[str, Any]:
    """``--baseline NAME=VALUE`` and ``--batch-sizes`` as the command adapter's options (``--cmd`` only)."""
    from autotune.trainers import adapter_class, adapter_names
    from autotune.trainers.command.template import baseline_options

    given = list(getattr(args, "baseline", None) or [])
    template = trainer in adapter_names() and adapter_class(trainer).traits.takes_template
    if given and not template:
        raise UsageError(
            f"--baseline gives the values a --cmd command runs with; trainer {trainer!r} reads them from "
            "its --config: drop --baseline, or write the value into the config"
        )
    return baseline_options(given, args.batch_sizes) if template else {}


def no_trial_validation(trainer: str | None) -> bool:
    """``--no-validation-in-trials``: only for a trainer whose trials run a validation pass."""
    from autotune.trainers import adapter_class, adapter_names

    if trainer not in adapter_names() or not adapter_class(trainer).traits.validates_in_trials:
        takes = [n for n in adapter_names() if adapter_class(n).traits.validates_in_trials]
        raise UsageError(
            f"--no-validation-in-trials goes with --trainer {' or '.join(takes)}: the trials of "
            f"--trainer {trainer or 'reference'} run no validation pass to skip"
        )
    return False


def trainer_python(path: Path, trainer: str | None) -> str:
    """``--trainer-python PATH``, checked now: only for a trainer that runs Python itself, and
    an executable file (a typo would otherwise fail every trial)."""
    from autotune.execution.launch import check_program
    from autotune.trainers import adapter_class, adapter_names

    if trainer not in adapter_names() or not adapter_class(trainer).traits.takes_trainer_python:
        takes = [name for name in adapter_names() if adapter_class(name).traits.takes_trainer_python]
        raise UsageError(
            f"--trainer-python goes with --trainer {' or '.join(takes)}"
            + (f", not {trainer}" if trainer else "")
            + "; for --cmd, write the Python into the command itself"
        )
    return check_program(str(path), "--trainer-python")


def cmd_sweep(args: argparse.Namespace) -> int:
    import optuna

    from autotune.core.units import plain
    from autotune.errors import SweepInterrupted
    from autotune.sweep.api import run_sweep

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # autotune prints its own progress
    opts = sweep_options(args)
    try:
        result = run_sweep(opts, parallel=args.parallel, lease_s=args.lease)
    except SweepInterrupted as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INTERRUPTED
    out = sys.stdout
    interrupted = (
        f" (+{result.trials_interrupted} interrupted, run again, not counted)"
        if result.trials_interrupted
        else ""
    )
    print(
        f"sweep {result.study}: {result.stop_reason} after {result.trials_run} trial(s) finished{interrupted}",
        file=out,
    )
    if result.search_left:
        print(f"search: {result.search_left}", file=out)
    if result.best_trial is None:
        print("no config finished and fit with the headroom asked for", file=out)
    else:
        speed = f"{plain(result.best_samples_per_s)} samples/s" if result.best_samples_per_s else "?"
        gain = ""
        if result.best_samples_per_s and result.baseline_samples_per_s:
            gain = f", {result.best_samples_per_s / result.baseline_samples_per_s:.2f}x the baseline"
        what = "best" if result.best_fit_measured is not False else "best (fastest; fit not measured)"
        config = (
            " ".join(f"{k}={v}" for k, v in (result.best_params or {}).items()) or "the baseline's config"
        )
        print(f"{what}: trial {result.best_trial}: {config} at {speed}{gain}", file=out)
    if result.busy_note:
        print(f"warning: {result.busy_note}", file=out)
    md = [p for p in result.reports if p.suffix == ".md"]
    if md:
        others = ", ".join(p.name for p in result.reports if p.suffix in (".html", ".json"))
        print(f"report: {md[0]}" + (f" (beside it: {others})" if others else ""), file=out)
    if not result.reports:
        print(f"see it with: autotune status --study {result.study} --storage {result.storage}", file=out)
    return EXIT_OK


# --- worker ------------------------------------------------------------------------------------


def add_scaleout_flags(p: argparse.ArgumentParser) -> None:
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
        type=duration("--lease"),
        default=DEFAULT_LEASE_S,
        help="a worker that sends no heartbeat for this long is taken for dead: its trial is recorded as "
        "interrupted and run again by another (default: "
        f"{format_duration(DEFAULT_LEASE_S)}; a dead worker on the same machine is noticed at once)",
    )


def add_worker(sub: argparse._SubParsersAction) -> None:
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
        type=duration("--wait"),
        default=0.0,
        help="if the study does not exist yet, wait this long for its sweep to start it (like 15m; "
        "default: 0, fail at once)",
    )
    add_scaleout_flags(p)
    p.set_defaults(handler=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> int:
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
