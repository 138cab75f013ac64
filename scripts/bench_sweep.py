#!/usr/bin/env python3
"""Benchmark autotune's search against the grid, the LTX-2 greedy, TPE and a batch-only search.

Every strategy searches the same simulated landscapes (``tests/fakes/landscape.py``: a memory
and a speed model per knob combination and batch size, noisy step times, minutes of model load
per trial, calibrated to 32/48/80/141 GB cards). Time is simulated: the trainer reports it and
nobody sleeps, so the suite takes minutes.

Two modes, side by side in one table:
- ``fast``: in-process; each strategy is asked ``next_candidate(history)`` and the landscape
  answers. For iterating on a strategy.
- ``real``: through the real orchestrator: ``autotune sweep --trainer command --cmd
  "PYTHON tests/fakes/sim_trainer.py ..."`` with real trial subprocesses and a real SQLite
  study per landscape; the simulated seconds are read back from each trial's metrics file
  (never wall time). Our strategy runs as shipped; a competitor runs in the same loop, handed
  to the sweep through its strategy seam (``run_sweep(strategy_factory=...)``, from the hidden
  ``_sweep-with`` entry below).

Figures per strategy: share of landscapes where its pick is the true best (within 3 % of the
true best's samples/s; the true best is the fastest point of the INTEGER grid, every batch size
from 1 to the maximum, that fits under the landscape's headroom line), mean and worst regret,
trials, simulated GPU-hours and their ratio to the integer grid's.
The orchestrator's overhead is the real wall time per trial beyond the trainer's own: between
two trial starts, less the trainer subprocess's wall time, as a median.

Seeds: the targets are judged on the HELD-OUT seeds 1001-1060 (the default), never used while
the strategy was developed; development used seeds 1-200 (``--first-seed 1``). Targets (issue
17): the true best within 3 % on 100 % of the landscapes with a fitting point; at most 30 % of
the integer grid's GPU-hours (aim 20 %) and at most 25 % of its trials; at most 2 trials when
nothing fits.

Exit status: 0 when every target holds, 1 when one is missed (the failing landscapes are
listed), 2 on bad usage. Example (docs/benchmark.md's table):

    python scripts/bench_sweep.py --mode real --jobs 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autotune.core.space import Candidate, Space  # noqa: E402
from autotune.core.strategy import Observation, Strategy  # noqa: E402
from scripts import bench_strategies as bs  # noqa: E402
from tests.fakes.landscape import KNOBS_YAML, Landscape, suite  # noqa: E402

OURS = "ours"
STRATEGIES = (OURS, *bs.COMPETITORS)
SIM_TRAINER = ROOT / "tests" / "fakes" / "sim_trainer.py"
STEPS = 50  # the sweep's default trial length, and LTX-2's own autotune's

#: The held-out seeds the targets are judged on (development used 1-200; never tune on these).
HELD_OUT_FIRST = 1001
HELD_OUT_COUNT = 60

#: Targets (docs/benchmark.md states them with the results).
FOUND_WITHIN = 0.03  # a pick within 3 % of the true best's samples/s counts as finding it
TARGET_FOUND = 1.0
TARGET_GPU_RATIO = 0.30
AIM_GPU_RATIO = 0.20
TARGET_TRIALS_RATIO = 0.25
TARGET_NOFIT_TRIALS = 2
TARGET_OVERHEAD_S = 0.3
OVERHEAD_TRIALS = 100

StrategyFactory = Callable[[Space, Candidate, float, float], Any]


@dataclass
class Run:
    """One strategy's search of one landscape."""

    strategy: str
    landscape: str
    mode: str
    trials: int = 0
    gpu_s: float = 0.0
    best_params: dict[str, Any] | None = None
    picked_sps: float = 0.0  # the pick's TRUE samples/s (0 when it picked nothing or a non-fit)
    true_best_sps: float | None = None  # None: nothing fits this landscape
    history: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    error: str | None = None

    @property
    def regret(self) -> float | None:
        if self.true_best_sps is None:
            return None
        return max(0.0, 1.0 - self.picked_sps / self.true_best_sps)

    @property
    def found(self) -> bool | None:
        if self.true_best_sps is None:
            return None
        return self.picked_sps >= (1.0 - FOUND_WITHIN) * self.true_best_sps


# --- one search ---------------------------------------------------------------------------------


def space_of(land: Landscape) -> Space:
    return Space.from_text(
        KNOBS_YAML, max_batch_size=land.max_batch_size, allow_extra_savers=land.allow_extra_savers
    )


def factory(name: str, *, tpe_budget: int | None = None, seed: int = 0) -> StrategyFactory:
    if name == OURS:
        return Strategy
    if name == bs.TpeStrategy.name:
        return bs.make(name, budget=tpe_budget or 12, seed=seed)
    return bs.make(name)


def judge(run: Run, land: Landscape) -> Run:
    """Fill in the pick's true speed and the landscape's true best."""
    truth = land.true_best()
    run.true_best_sps = truth[1] if truth else None
    if run.best_params is not None and land.fits(run.best_params):
        run.picked_sps = land.samples_per_s(run.best_params)
    return run


def run_fast(land: Landscape, name: str, make: StrategyFactory) -> Run:
    """The strategy against the landscape in-process, with the sweep's baseline rule."""
    space = space_of(land)
    baseline = space.candidate(land.baseline)
    strategy = make(space, baseline, land.card_gb, land.headroom)
    history: list[Observation] = []
    run = Run(name, land.name, "fast")
    limit = 2 * len(space) + 2  # a strategy that never stops is a bug: end it, and say so
    remeasure = getattr(strategy, "remeasure", None)  # as the sweep's loop asks it, when the search is done
    while True:
        cand = strategy.next_candidate(history)
        if cand is None and remeasure is not None:
            cand = remeasure(history)
        if cand is None:
            break
        if len(history) >= limit:
            run.error = f"still proposing after {limit} trials"
            break
        again = sum(1 for o in history if o.candidate == cand and o.outcome == "ok")
        sim = land.simulate(dict(cand.params), steps=STEPS, run=again)  # a re-measure draws new noise
        run.gpu_s += sim.seconds
        history.append(Observation(cand, sim.outcome, sim.samples_per_s, sim.peak_vram_gb, None, sim.spread))
        run.history.append((dict(cand.params), sim.outcome))
        if (
            len(history) == 1
            and sim.outcome != "ok"
            and not (sim.outcome == "oom" and land.allow_extra_savers)
        ):
            break  # the sweep stops when the baseline fails (an OOM leaves only extra savers)
    run.trials = len(history)
    best = strategy.best(history)
    run.best_params = dict(best.candidate.params) if best is not None else None
    return judge(run, land)


def write_inputs(land: Landscape, where: Path) -> tuple[Path, Path]:
    """The landscape spec and an LTX-2-shaped baseline config the command adapter patches."""
    where.mkdir(parents=True, exist_ok=True)
    spec = where / "landscape.json"
    spec.write_text(land.to_json(), encoding="utf-8")
    b = land.baseline
    quant = "null" if b["quantization"] == "none" else b["quantization"]
    config = where / "baseline.yaml"
    config.write_text(
        "# baseline for the simulated trainer (LTX-2 keys)\n"
        f"acceleration:\n  quantization: {quant}\n"
        f"optimization:\n  optimizer_type: {b['optimizer']}\n  batch_size: {b['batch_size']}\n"
        "  gradient_accumulation_steps: 1\n"
        f"  enable_gradient_checkpointing: {'true' if b['gradient_checkpointing'] else 'false'}\n"
        f"  steps: {STEPS}\n",
        encoding="utf-8",
    )
    return spec, config


def sweep_argv(land: Landscape, spec: Path, config: Path, workdir: Path, study: str) -> list[str]:
    ledger = spec.with_name("runs.jsonl")  # a re-measure draws new noise, as in-process
    cmd = (
        f"{shlex.quote(sys.executable)} {shlex.quote(str(SIM_TRAINER))} --landscape {shlex.quote(str(spec))} "
        f"--runs-ledger {shlex.quote(str(ledger))} --config {{config}}"
    )
    argv = [
        "sweep",
        "--trainer",
        "command",
        "--cmd",
        cmd,
        "--config",
        str(config),
        "--vram-gb",
        repr(land.card_gb),
        "--headroom",
        repr(land.headroom),
        "--max-batch-size",
        str(land.max_batch_size),
        "--steps",
        str(STEPS),
        "--workdir",
        str(workdir),
        "--study",
        study,
    ]
    if land.allow_extra_savers:
        argv.append("--allow-extra-savers")
    return argv


def run_real(land: Landscape, name: str, workdir: Path, *, tpe_budget: int | None, seed: int) -> Run:
    """The strategy through ``autotune sweep`` (ours as shipped, others swapped in)."""
    where = workdir / land.name / name
    spec, config = write_inputs(land, where)
    study = f"{land.name}-{name}"
    argv = sweep_argv(land, spec, config, where, study)
    if name == OURS:
        cmd = [sys.executable, "-m", "autotune", *argv]
    else:
        extra = ["--tpe-budget", str(tpe_budget or 12), "--seed", str(seed)] if name == "tpe" else []
        cmd = [sys.executable, str(Path(__file__).resolve()), "_sweep-with", name, *extra, "--", *argv]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(where / "sweep.log", "wb") as log:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    run = Run(name, land.name, "real")
    try:
        read_study(run, f"sqlite:///{where / 'studies.db'}", study)
    except Exception as exc:  # a broken run is reported in the table, not hidden
        run.error = f"cannot read the study: {exc}"
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not _baseline_failed(run)):
        tail = (where / "sweep.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
        run.error = f"sweep exited {proc.returncode}: {' | '.join(tail)}"
    return judge(run, land)


def _baseline_failed(run: Run) -> bool:
    return bool(run.history) and run.history[0][1] != "ok"


def read_study(run: Run, storage: str, study_name: str) -> None:
    """Trials, simulated seconds (from each trial's metrics file) and the pick."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=study_name, storage=storage)
    trials = sorted(
        (t for t in study.get_trials(deepcopy=False) if t.state.is_finished()), key=lambda t: t.number
    )
    for t in trials:
        trial_dir = Path(str(t.user_attrs.get("trial_dir", "")))
        try:
            metrics = json.loads((trial_dir / "trainer-metrics.json").read_text(encoding="utf-8"))
            run.gpu_s += float(metrics["simulated_seconds"])
        except (OSError, ValueError, KeyError, TypeError):
            run.error = f"trial {t.number}: no simulated time in {trial_dir}/trainer-metrics.json"
        run.history.append((dict(t.params), str(t.user_attrs.get("outcome"))))
    run.trials = len(trials)
    best = study.user_attrs.get("best_trial")
    if isinstance(best, int):
        run.best_params = dict(study.trials[best].params)


def sweep_with(argv: list[str]) -> int:
    """``_sweep-with NAME [--tpe-budget N] [--seed S] -- SWEEP ARGS``: the real CLI, another strategy."""
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(prog="bench_sweep.py _sweep-with")
    ap.add_argument("name", choices=list(bs.COMPETITORS))
    ap.add_argument("--tpe-budget", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv[:cut])
    rest = argv[cut + 1 :]
    import optuna

    from autotune import cli
    from autotune.errors import AutotuneError, SweepInterrupted
    from autotune.sweep.api import run_sweep

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    parsed = cli.build_parser().parse_args(rest)
    try:  # the sweep as ``autotune sweep`` runs it, with this strategy through the sweep's seam
        run_sweep(
            cli._sweep_options(parsed),
            parallel=parsed.parallel,
            lease_s=parsed.lease,
            strategy_factory=factory(args.name, tpe_budget=args.tpe_budget, seed=args.seed),
        )
    except SweepInterrupted as exc:
        print(str(exc), file=sys.stderr)
        return cli.EXIT_INTERRUPTED
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return cli.EXIT_OK


# --- the table ----------------------------------------------------------------------------------


@dataclass
class Row:
    strategy: str
    mode: str
    runs: list[Run]
    grid_gpu_s: float
    grid_trials: int = 0

    @property
    def judged(self) -> list[Run]:
        return [r for r in self.runs if r.true_best_sps is not None]

    @property
    def found_share(self) -> float:
        return sum(1 for r in self.judged if r.found) / max(1, len(self.judged))

    @property
    def mean_regret(self) -> float:
        return statistics.fmean(r.regret or 0.0 for r in self.judged) if self.judged else 0.0

    @property
    def worst_regret(self) -> float:
        return max((r.regret or 0.0 for r in self.judged), default=0.0)

    @property
    def gpu_s(self) -> float:
        return sum(r.gpu_s for r in self.runs)

    @property
    def gpu_ratio(self) -> float:
        return self.gpu_s / self.grid_gpu_s if self.grid_gpu_s else math.nan

    @property
    def trials(self) -> int:
        return sum(r.trials for r in self.runs)

    @property
    def trials_ratio(self) -> float:
        return self.trials / self.grid_trials if self.grid_trials else math.nan

    @property
    def nofit_trials(self) -> int:
        """The most trials run on a landscape where nothing fits (0 when every landscape has a fit)."""
        return max((r.trials for r in self.runs if r.true_best_sps is None), default=0)

    @property
    def misses(self) -> list[Run]:
        return [r for r in self.judged if not r.found]


def table(rows: Sequence[Row], n_landscapes: int, n_judged: int) -> str:
    lines = [
        f"| strategy | mode | found true best (of {n_judged}) | mean regret | worst regret "
        f"| trials (mean) | trials vs grid | simulated GPU-hours | vs grid |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        n_found = sum(1 for x in r.judged if x.found)
        lines.append(
            f"| {r.strategy} | {r.mode} | {r.found_share:.1%} ({n_found}) | {r.mean_regret:.2%} "
            f"| {r.worst_regret:.1%} | {r.trials / max(1, n_landscapes):.1f} | {r.trials_ratio:.1%} "
            f"| {r.gpu_s / 3600:.1f} "
            f"| {r.gpu_ratio:.1%} |"
        )
    return "\n".join(lines)


def breakdown(runs: Sequence[Run], by_name: dict[str, Landscape]) -> str:
    """Where a strategy's simulated GPU-hours went: docs/benchmark.md's before/after breakdown."""
    hours: dict[str, float] = dict.fromkeys(
        ("baseline", "winning family", "losing families, batch <= 2", "losing families, batch > 2",
         "out of memory", "re-measures"), 0.0
    )  # fmt: skip
    for run in runs:
        land = by_name[run.landscape]
        truth = land.true_best()
        seen: dict[str, int] = {}
        for i, (params, outcome) in enumerate(run.history):
            key = json.dumps(sorted((k, str(v)) for k, v in params.items()))
            sim = land.simulate(params, steps=STEPS, run=seen.get(key, 0))
            if i == 0:
                what = "baseline"
            elif seen.get(key, 0) > 0:
                what = "re-measures"
            elif outcome != "ok":
                what = "out of memory"
            elif truth is not None and _family(params) == _family(truth[0]):
                what = "winning family"
            else:
                what = f"losing families, batch {'<= 2' if int(params['batch_size']) <= 2 else '> 2'}"
            if outcome == "ok":
                seen[key] = seen.get(key, 0) + 1
            hours[what] += sim.seconds / 3600
    total = sum(hours.values()) or 1.0
    parts = [f"{k} {v:.1f} h ({v / total:.0%})" for k, v in hours.items()]
    return f"Where {runs[0].strategy}'s simulated GPU-hours went: " + "; ".join(parts) + "."


def _family(params: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(v) for k, v in sorted(params.items()) if k != "batch_size")


def describe_miss(run: Run, land: Landscape) -> str:
    truth = land.true_best()
    assert truth is not None
    picked = run.best_params
    return (
        f"  {land.name} ({land.card}, headroom {land.headroom:.0%}, max batch {land.max_batch_size}"
        f"{', extra savers' if land.allow_extra_savers else ''}, seed {land.seed}): "
        f"true best {_label(truth[0])} at {truth[1]:.4g} samples/s; picked "
        f"{_label(picked) if picked else 'nothing'} at {run.picked_sps:.4g} "
        f"(regret {run.regret or 0:.1%}) after {run.trials} trials"
    )


def _label(params: dict[str, Any]) -> str:
    q = params.get("quantization")
    return (
        f"{'bf16' if q in (None, 'none') else q} {params.get('optimizer')} "
        f"bs={params.get('batch_size')} {'ckpt' if params.get('gradient_checkpointing') else 'no-ckpt'}"
    )


# --- orchestrator overhead ----------------------------------------------------------------------

#: A trainer that exits at once: ``sh`` writes the metrics file (samples/s = batch size, so the
#: search keeps raising batches) and ends. Braces are doubled for the command template.
INSTANT_SCRIPT = (
    'printf "{{\\"samples_per_s\\": %s, \\"step_time_s\\": 1.0, \\"peak_vram_gb\\": %s}}" '
    '{batch_size} {batch_size} > "$AUTOTUNE_METRICS_FILE"'
)


@dataclass
class Overhead:
    intervals_s: list[float]  # between consecutive trial starts, real wall time
    trainer_s: float  # the instant trainer's own wall time, run alone (median)
    sweeps: int
    cpu_s_per_trial: float  # the sweep processes' CPU time (start-up included) per trial: load-proof
    load: tuple[float, float]  # 1-minute load average before and after: a busy machine inflates wall time

    @property
    def per_trial_s(self) -> list[float]:
        return [x - self.trainer_s for x in self.intervals_s]

    @property
    def median_s(self) -> float:
        return statistics.median(self.per_trial_s)


def instant_trainer_s(where: Path, repeat: int = 30) -> float:
    """The instant trainer's own wall time: the same command run alone, median of ``repeat``."""
    argv = ["sh", "-c", INSTANT_SCRIPT.replace("{{", "{").replace("}}", "}").replace("{batch_size}", "4")]
    env = {**os.environ, "AUTOTUNE_METRICS_FILE": str(where / "alone.json")}
    times = []
    for _ in range(repeat):
        t = time.monotonic()
        subprocess.run(argv, env=env, check=True, stdin=subprocess.DEVNULL)
        times.append(time.monotonic() - t)
    return statistics.median(times)


def measure_overhead(workdir: Path, trials: int) -> Overhead:
    """Our sweep with the instant trainer, sweep after sweep, until ``trials`` intervals are timed."""
    import optuna

    where = workdir / "overhead"
    where.mkdir(parents=True, exist_ok=True)
    intervals: list[float] = []
    sweeps = n_trials = 0
    cpu = 0.0
    load_before = os.getloadavg()[0]
    while len(intervals) < trials:
        sweeps += 1
        study = f"overhead-{sweeps}"
        argv = [
            *("sweep", "--trainer", "command", "--cmd", f"sh -c {shlex.quote(INSTANT_SCRIPT)}"),
            *("--vram-gb", "1000", "--max-batch-size", "64", "--allow-extra-savers"),
            *("--workdir", str(where), "--study", study),
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(where / f"{study}.log", "wb") as log:
            proc = subprocess.run(
                [sys.executable, "-m", "autotune", *argv],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise RuntimeError(
                f"the overhead sweep {study} exited {proc.returncode}; see {where / study}.log"
            )
        loaded = optuna.load_study(study_name=study, storage=f"sqlite:///{where / 'studies.db'}")
        starts = sorted(t.datetime_start for t in loaded.get_trials(deepcopy=False) if t.datetime_start)
        if len(starts) < 2:
            raise RuntimeError(f"the overhead sweep {study} ran {len(starts)} trial(s); it needs several")
        intervals += [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
        n_trials += len(starts)
    load = (load_before, os.getloadavg()[0])
    return Overhead(intervals[:trials], instant_trainer_s(where), sweeps, cpu / n_trials, load)


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="bench_sweep.py",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  python scripts/bench_sweep.py --mode fast          every strategy in-process (seconds)\n"
            "  python scripts/bench_sweep.py --jobs 2             ours through the real sweep on every\n"
            "                                                     landscape, the grid on 5, overhead\n"
            "  python scripts/bench_sweep.py --real all --real-subset all   everything real (long)"
        ),
    )
    ap.add_argument(
        "--landscapes",
        type=int,
        default=HELD_OUT_COUNT,
        help=f"how many landscapes (default: {HELD_OUT_COUNT}, the held-out seeds "
        f"{HELD_OUT_FIRST}..{HELD_OUT_FIRST + HELD_OUT_COUNT - 1})",
    )
    ap.add_argument(
        "--first-seed",
        type=int,
        default=HELD_OUT_FIRST,
        help=f"seed of the first landscape (default: {HELD_OUT_FIRST}, the first held-out seed; the targets "
        "are judged there. Development used seeds 1-200: --first-seed 1)",
    )
    ap.add_argument(
        "--mode",
        choices=("fast", "real"),
        default="real",
        help="fast: in-process only; real: also through 'autotune sweep' for the --real strategies "
        "(default: real)",
    )
    ap.add_argument(
        "--real",
        default="ours,grid",
        help="strategies also run through the real sweep, comma-separated, or 'all' (default: ours,grid)",
    )
    ap.add_argument(
        "--real-subset",
        default="5",
        help="on how many landscapes the real strategies other than ours run through the real sweep "
        "(a number or 'all'; default: 5); ours always runs on all. A strategy real on every landscape "
        "shows its real figures; one real on a subset shows its in-process figures, checked trial by "
        "trial against the real runs",
    )
    ap.add_argument(
        "--strategies",
        default=",".join(STRATEGIES),
        help=f"which strategies to run (default: {','.join(STRATEGIES)})",
    )
    ap.add_argument(
        "--overhead-trials",
        type=int,
        help=f"trials timed for the orchestrator's overhead (default: {OVERHEAD_TRIALS} in real mode, "
        "0 in fast mode; 0 skips it)",
    )
    ap.add_argument("--jobs", type=int, default=1, help="real sweeps run at once (default: 1)")
    ap.add_argument(
        "--workdir",
        type=Path,
        default=ROOT / "autotune-runs" / "bench",
        help="where real sweeps write studies and trial folders (default: autotune-runs/bench; emptied first)",
    )
    ap.add_argument("--seed", type=int, default=0, help="TPE's sampler seed (default: 0)")
    ap.add_argument(
        "--no-targets", action="store_true", help="print the table but exit 0 even when a target is missed"
    )
    ap.add_argument("-o", "--output", type=Path, help="also write the report (markdown) to this file")
    args = ap.parse_args(argv)
    args.strategies = _names(args.strategies, ap)
    real = list(args.strategies) if args.real == "all" else _names(args.real, ap)
    args.real = [] if args.mode == "fast" else [s for s in real if s in args.strategies]
    if OURS not in args.strategies or "grid" not in args.strategies:
        ap.error("keep 'ours' and 'grid' in --strategies: the figures are ours against the grid's")
    if args.landscapes < 1 or args.jobs < 1:
        ap.error("--landscapes and --jobs must be at least 1")
    if args.real_subset == "all":
        args.real_subset = args.landscapes
    elif args.real_subset.isdigit():
        args.real_subset = min(int(args.real_subset), args.landscapes)
    else:
        ap.error(f"--real-subset takes a number or 'all', not {args.real_subset!r}")
    if args.overhead_trials is None:
        args.overhead_trials = OVERHEAD_TRIALS if args.mode == "real" else 0
    return args


def _names(text: str, ap: argparse.ArgumentParser) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        ap.error(f"unknown strategies {unknown}; known: {', '.join(STRATEGIES)}")
    return names


def _run_all(
    name: str, mode: str, lands: Sequence[Landscape], budgets: dict[str, int], args: argparse.Namespace
) -> list[Run]:
    def one(land: Landscape) -> Run:
        budget = budgets.get(land.name)
        if mode == "fast":
            return run_fast(land, name, factory(name, tpe_budget=budget, seed=args.seed))
        return run_real(land, name, args.workdir, tpe_budget=budget, seed=args.seed)

    if mode == "real" and args.jobs > 1:
        with ThreadPoolExecutor(args.jobs) as pool:
            return list(pool.map(one, lands))
    return [one(land) for land in lands]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_sweep-with"]:
        return sweep_with(argv[1:])
    args = parse_args(argv)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    lands = suite(args.landscapes, first_seed=args.first_seed)
    by_name = {land.name: land for land in lands}
    t0 = time.monotonic()
    if args.real or args.overhead_trials:
        import shutil

        shutil.rmtree(args.workdir, ignore_errors=True)
        args.workdir.mkdir(parents=True, exist_ok=True)

    # Every strategy in-process; ours first, since TPE gets as many trials as ours needed.
    order = [OURS, *[s for s in args.strategies if s != OURS]]
    fast: dict[str, list[Run]] = {}
    budgets: dict[str, int] = {}
    for name in order:
        fast[name] = _run_all(name, "fast", lands, budgets, args)
        if name == OURS:
            budgets = {r.landscape: max(1, r.trials) for r in fast[name]}
    t_fast = time.monotonic() - t0
    # Then through the real sweep: ours on every landscape, the others on a subset.
    real: dict[str, list[Run]] = {}
    for name in args.real:
        subset = lands if name == OURS else lands[: args.real_subset]
        real[name] = _run_all(name, "real", subset, budgets, args)
    overhead = measure_overhead(args.workdir, args.overhead_trials) if args.overhead_trials > 0 else None
    elapsed = time.monotonic() - t0

    rows: list[Row] = []
    notes: list[str] = []
    grid_fast_s = sum(r.gpu_s for r in fast["grid"])
    for name in order:
        runs, mode = fast[name], "fast"
        if name in real:
            same = [
                a.landscape for a, b in zip(real[name], fast[name], strict=False) if a.history == b.history
            ]
            differ = [a.landscape for a in real[name] if a.landscape not in same]
            if len(real[name]) == len(lands):
                runs, mode = real[name], "real"
            else:
                mode = f"fast; real on {len(real[name])}"
            check = f"{len(same)}/{len(real[name])}"
            notes.append(
                f"{name}: the real sweep took the same trials as in-process in {check} landscapes"
                + (f"; differ: {', '.join(differ)}" if differ else "")
            )
            mode += f" (same trials {check})"
        grid_s = (
            sum(r.gpu_s for r in real["grid"])
            if mode.startswith("real") and len(real.get("grid", [])) == len(lands)
            else grid_fast_s
        )
        grid_n = (
            sum(r.trials for r in real["grid"])
            if mode.startswith("real") and len(real.get("grid", [])) == len(lands)
            else sum(r.trials for r in fast["grid"])
        )
        rows.append(Row(name, mode, runs, grid_s, grid_n))
    n_judged = sum(1 for land in lands if land.true_best() is not None)
    out = [table(rows, len(lands), n_judged), ""]
    if overhead is not None:
        q = statistics.quantiles(overhead.per_trial_s, n=10)
        out.append(
            f"Orchestrator overhead: {overhead.median_s:.3f} s per trial (median over {len(overhead.intervals_s)} "
            f"trials in {overhead.sweeps} sweeps of ours; p10 {q[0]:.3f} s, p90 {q[-1]:.3f} s): real wall time "
            f"between trial starts, less the trainer's own {overhead.trainer_s * 1000:.0f} ms (a trainer that "
            f"exits at once, timed alone). CPU time of the sweep process per trial, start-up included: "
            f"{overhead.cpu_s_per_trial:.3f} s. Load average {overhead.load[0]:.1f} -> {overhead.load[1]:.1f} "
            f"on {os.cpu_count()} CPUs."
        )
    out.append(breakdown(rows[0].runs, by_name))
    out += notes
    errors = [r for runs in (*fast.values(), *real.values()) for r in runs if r.error]
    out += [f"error: {r.strategy} ({r.mode}) on {r.landscape}: {r.error}" for r in errors]
    out.append(
        f"{len(lands)} landscapes (seeds {args.first_seed}..{args.first_seed + len(lands) - 1}), "
        f"{n_judged} with a fitting point; {elapsed:.0f} s wall ({t_fast:.0f} s in-process)."
    )

    # Targets.
    failures: list[str] = []
    ours = rows[0]
    if ours.found_share < TARGET_FOUND:
        failures.append(
            f"ours found the true best in {ours.found_share:.1%} of landscapes (target >= {TARGET_FOUND:.0%})"
        )
    if ours.gpu_ratio > TARGET_GPU_RATIO:
        failures.append(
            f"ours used {ours.gpu_ratio:.1%} of the grid's GPU-hours (target <= {TARGET_GPU_RATIO:.0%})"
        )
    if ours.trials_ratio > TARGET_TRIALS_RATIO:
        failures.append(
            f"ours ran {ours.trials_ratio:.1%} of the grid's trials (target <= {TARGET_TRIALS_RATIO:.0%})"
        )
    if ours.nofit_trials > TARGET_NOFIT_TRIALS:
        failures.append(
            f"ours ran {ours.nofit_trials} trials on a landscape where nothing fits "
            f"(target <= {TARGET_NOFIT_TRIALS})"
        )
    greedy = [r for r in rows if r.strategy == bs.Ltx2GreedyStrategy.name]
    if greedy and not ours.found_share > greedy[0].found_share:
        failures.append(
            f"ours found the true best no more often than the LTX-2 greedy ({ours.found_share:.1%} vs "
            f"{greedy[0].found_share:.1%})"
        )
    if overhead is not None and overhead.median_s > TARGET_OVERHEAD_S:
        failures.append(
            f"orchestrator overhead {overhead.median_s:.3f} s per trial (target <= {TARGET_OVERHEAD_S} s)"
        )
    if errors:
        failures.append(f"{len(errors)} run(s) ended in an error (listed above)")
    if ours.misses:
        out.append(f"ours ({ours.mode}) missed the true best on:")
        out += [describe_miss(r, by_name[r.landscape]) for r in ours.misses]
    out += [f"TARGET MISSED: {f}" for f in failures]
    if not failures:
        out.append(
            f"targets met: ours found the true best in {ours.found_share:.1%} (>= {TARGET_FOUND:.0%}) with "
            f"{ours.gpu_ratio:.1%} of the grid's GPU-hours (<= {TARGET_GPU_RATIO:.0%}, aim {AIM_GPU_RATIO:.0%}), "
            f"{ours.trials_ratio:.1%} of its trials (<= {TARGET_TRIALS_RATIO:.0%}), at most {ours.nofit_trials} "
            f"trial(s) where nothing fits (<= {TARGET_NOFIT_TRIALS})"
            + (
                f", overhead {overhead.median_s:.3f} s per trial (<= {TARGET_OVERHEAD_S} s)"
                if overhead is not None
                else "; overhead not measured"
            )
        )
    text = "\n".join(out)
    print(text)
    if args.output:
        args.output.write_text(text + "\n", encoding="utf-8")
    return 1 if failures and not args.no_targets else 0


if __name__ == "__main__":
    sys.exit(main())
