"""The GPU check: prove on a real card what CI cannot.

Runs short sweeps of the built-in reference trainer on CUDA, each under an emulated
card size (``--vram-gb N``: the trainer caps itself with
``torch.cuda.set_per_process_memory_fraction``), then checks and prints:

- OOM trials carry real CUDA OOM texts and are classified ``oom``;
- per measured trial, the trainer's reported peak, autotune's NVML measurement and
  ``torch.cuda.max_memory_reserved`` (from the trainer's metrics file) agree within 10 %;
- the card drains between trials (NVML used memory back at its idle level after each sweep;
  the sweep itself refuses to go on when it does not);
- the winners differ sensibly: a bigger card's winner is at least as fast and may use more memory.

``--dry-run`` checks the plan and the Python environment on a machine without a GPU.
Exit status: 0 all checks passed, 1 a check failed, 2 the environment is not usable.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "reference" / "gpu_check.yaml"
AGREEMENT = 0.10  # the three peak readings must agree within 10 %
DRAIN_TOLERANCE_GB = 0.5
OOM_TEXTS = ("CUDA out of memory", "CUDA error: out of memory")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class SweepRun:
    size_gb: float
    workdir: Path
    study: str
    rc: int = -1
    wall_s: float = 0.0
    trials: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dry-run", action="store_true", help="check the plan and environment only; no GPU needed"
    )
    p.add_argument("--sizes", default="24,48", help="emulated card sizes in GB (default: 24,48)")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per trial (default: 20)")
    p.add_argument("--max-trials", type=int, default=7, help="trials per card size (default: 7)")
    p.add_argument("--sweep-timeout", type=float, default=100.0, help="seconds per sweep (default: 100)")
    p.add_argument("--out", type=Path, default=None, help="results folder (default: $OUT or a temp dir)")
    return p.parse_args(argv)


def sweep_command(run: SweepRun, args: argparse.Namespace) -> list[str]:
    cmd = [
        sys.executable, "-m", "autotune", "sweep",
        "--trainer", "reference",
        "--config", str(CONFIG),
        "--vram-gb", f"{run.size_gb:g}",
        "--workdir", str(run.workdir),
        "--study", run.study,
        "--steps", str(args.steps),
        "--max-trials", str(args.max_trials),
        "--trial-timeout", "60s",
        "--stall-timeout", "40s",
        "--max-batch-size", "8",
    ]  # fmt: skip
    if run.size_gb < 32:
        cmd.append("--force")  # below the LTX-2 trainer's 32 GB floor: the check wants it anyway
    return cmd


def check_environment(dry_run: bool) -> list[Check]:
    checks = []
    for module in ("optuna", "sqlalchemy", "yaml", "ruamel.yaml", "pynvml", "psutil", "autotune", "torch"):
        try:
            mod = importlib.import_module(module)
            version = getattr(mod, "__version__", "")
            checks.append(Check(f"import {module}", True, str(version)))
        except Exception as exc:
            checks.append(Check(f"import {module}", False, f"{type(exc).__name__}: {exc}"))
    for optional in ("optimum.quanto", "bitsandbytes"):
        try:
            importlib.import_module(optional)
            checks.append(Check(f"import {optional}", True, "(knob available)"))
        except Exception as exc:
            checks.append(Check(f"import {optional}", dry_run, f"knob unavailable: {type(exc).__name__}"))
    if not CONFIG.is_file():
        checks.append(Check("reference GPU config", False, f"missing {CONFIG}"))
    else:
        checks.append(Check("reference GPU config", True, str(CONFIG.relative_to(REPO))))
    if not dry_run:
        try:
            import torch

            ok = torch.cuda.is_available()
            name = torch.cuda.get_device_name(0) if ok else "no CUDA device"
            checks.append(Check("CUDA available", ok, f"torch {torch.__version__}, {name}"))
        except Exception as exc:
            checks.append(Check("CUDA available", False, str(exc)))
    return checks


def validate_config() -> Check:
    """The GPU config parses with the reference trainer's own validator."""
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from trials.reference.config import load_config; "
         "c = load_config(__import__('pathlib').Path(sys.argv[1])); print(c.optimizer)", str(CONFIG)],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    return Check(
        "config valid for the reference trainer",
        proc.returncode == 0,
        (proc.stderr or proc.stdout)[-300:].strip(),
    )


def probe() -> tuple[Check, float | None]:
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "probe", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return Check("autotune probe", False, proc.stderr.strip()[-300:]), None
    gpus = data.get("gpus") or []
    total = min((float(g.get("memory_total_gib") or 0) for g in gpus), default=None)
    names = ", ".join(str(g.get("name")) for g in gpus) or "none"
    return Check("autotune probe", proc.returncode == 0 and bool(gpus), f"GPUs: {names}"), total


def nvml_used_gb() -> float | None:
    try:
        from autotune.gpu.nvml import open_nvml

        nv = open_nvml()
        return sum(nv.memory_used_bytes(d.index) for d in nv.devices()) / 1024**3
    except Exception:
        return None


def read_study(run: SweepRun) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{run.workdir / 'studies.db'}"
    study = optuna.load_study(study_name=run.study, storage=url)
    for t in study.trials:
        a = t.user_attrs
        trial_dir = Path(a.get("trial_dir") or "")
        reserved = None
        metrics_file = trial_dir / "trainer-metrics.json"
        if metrics_file.is_file():
            try:
                m = json.loads(metrics_file.read_text())
                reserved = m.get("max_memory_reserved_gb", m.get("peak_vram_gb"))
            except (OSError, ValueError):
                reserved = None
        stderr = ""
        if (trial_dir / "stderr.log").is_file():
            stderr = (trial_dir / "stderr.log").read_text(errors="replace")[-20000:]
        run.trials.append(
            {
                "number": t.number,
                "params": dict(t.params),
                "outcome": a.get("outcome"),
                "samples_per_s": a.get("samples_per_s"),
                "trainer_peak": a.get("trainer_peak_vram_gb"),
                "nvml_peak": a.get("measured_peak_vram_gb"),
                "reserved_peak": reserved,
                "fits": a.get("fits"),
                "cuda_oom_text": any(s in stderr for s in OOM_TEXTS),
            }
        )
    best = study.user_attrs.get("best_trial")
    if isinstance(best, int):
        run.best = next((t for t in run.trials if t["number"] == best), None)


def agree(values: list[float | None]) -> bool | None:
    present = [v for v in values if isinstance(v, (int, float)) and v > 0]
    if len(present) < 3:
        return None
    return (max(present) - min(present)) / max(present) <= AGREEMENT


def fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    out = args.out or (
        Path(os.environ["OUT"]) if os.environ.get("OUT") else Path(tempfile.mkdtemp("-gpu-check"))
    )
    out.mkdir(parents=True, exist_ok=True)
    runs = [SweepRun(size, out / f"card-{size:g}gb", f"gpu-check-{size:g}gb") for size in sizes]

    print(f"autotune GPU check ({'dry run' if args.dry_run else 'real run'}); results in {out}")
    print("plan:")
    for run in runs:
        print("  " + " ".join(sweep_command(run, args)))
    checks = check_environment(args.dry_run)
    if CONFIG.is_file() and all(c.ok for c in checks if c.name == "import torch"):
        checks.append(validate_config())
    helped = subprocess.run(
        [sys.executable, "-m", "autotune", "sweep", "--help"], capture_output=True, cwd=REPO
    )
    checks.append(Check("autotune sweep --help", helped.returncode == 0, ""))
    for c in checks:
        print(f"  [{'ok' if c.ok else 'FAIL'}] {c.name} {c.detail}")
    if not all(c.ok for c in checks):
        print("error: the environment is not ready for the GPU check (see FAIL lines above)", file=sys.stderr)
        return 2
    if args.dry_run:
        print("dry run: plan and environment OK")
        return 0

    pc, card_gb = probe()
    print(f"  [{'ok' if pc.ok else 'FAIL'}] {pc.name} {pc.detail}")
    if card_gb is not None and card_gb < max(sizes):
        print(f"error: the card has {card_gb:.1f} GB, less than the largest emulated size", file=sys.stderr)
        return 2
    idle = nvml_used_gb()
    results: list[Check] = [pc]
    for run in runs:
        cmd = sweep_command(run, args)
        start = time.monotonic()
        with open(out / f"sweep-{run.size_gb:g}gb.log", "w") as log:
            try:
                run.rc = subprocess.run(
                    cmd,
                    cwd=REPO,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=args.sweep_timeout,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                run.rc = 124
        run.wall_s = time.monotonic() - start
        read_study(run)
        used = nvml_used_gb()
        drained = idle is not None and used is not None and used - idle <= DRAIN_TOLERANCE_GB
        results.append(
            Check(f"{run.size_gb:g} GB sweep ended cleanly", run.rc == 0, f"exit {run.rc}, {run.wall_s:.0f}s")
        )
        results.append(
            Check(f"{run.size_gb:g} GB card drained", drained, f"idle {fmt(idle)} GB, after {fmt(used)} GB")
        )

    print("\ntrials (peaks in GiB: trainer / NVML / max_memory_reserved)")
    print(
        f"{'card':>6} {'#':>3} {'params':<52} {'outcome':<10} {'samples/s':>9} {'trainer':>8} {'nvml':>8} {'reserved':>8}"
    )
    ooms = 0
    for run in runs:
        for t in run.trials:
            params = ",".join(f"{k}={v}" for k, v in sorted(t["params"].items()))
            print(
                f"{run.size_gb:>6g} {t['number']:>3} {params:<52.52} {t['outcome']!s:<10} {fmt(t['samples_per_s']):>9}"
                f" {fmt(t['trainer_peak']):>8} {fmt(t['nvml_peak']):>8} {fmt(t['reserved_peak']):>8}"
            )
            if t["outcome"] == "oom":
                ooms += 1
                results.append(
                    Check(
                        f"trial {run.size_gb:g}GB#{t['number']} OOM is a real CUDA OOM",
                        t["cuda_oom_text"],
                        "",
                    )
                )
            elif t["cuda_oom_text"]:
                results.append(
                    Check(
                        f"trial {run.size_gb:g}GB#{t['number']} CUDA OOM classified oom",
                        False,
                        str(t["outcome"]),
                    )
                )
            if t["outcome"] == "ok":
                verdict = agree([t["trainer_peak"], t["nvml_peak"], t["reserved_peak"]])
                results.append(
                    Check(f"trial {run.size_gb:g}GB#{t['number']} peaks agree within 10%", verdict is True,
                          "three readings" if verdict is not None else "a reading is missing")
                )  # fmt: skip
    results.append(Check("at least one real CUDA OOM across the cards", ooms > 0, f"{ooms} OOM trials"))
    winners = [(r.size_gb, r.best) for r in runs]
    print("\nwinners")
    for size, best in winners:
        print(
            f"  {size:>4g} GB: {best['params'] if best else None} at {fmt(best and best['samples_per_s'])} samples/s"
        )
    found = [(s, b) for s, b in winners if b]
    results.append(Check("every card has a winner", len(found) == len(winners), ""))
    sensible = all(
        (b2["samples_per_s"] or 0) >= (b1["samples_per_s"] or 0) * 0.97
        for (_, b1), (_, b2) in itertools.pairwise(found)
    )
    results.append(Check("bigger cards' winners are at least as fast (3% noise)", sensible, ""))
    distinct = len({json.dumps(b["params"], sort_keys=True) for _, b in found}) > 1
    results.append(Check("the winners differ between card sizes", distinct, ""))
    for run in runs:  # the reports, for the record
        for report in run.workdir.rglob("report.*"):
            dest = out / f"report-{run.size_gb:g}gb{report.suffix}"
            if report.resolve() != dest.resolve():
                shutil.copyfile(report, dest)

    print("\nsummary")
    for c in results:
        print(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}{' - ' + c.detail if c.detail else ''}")
    failed = [c for c in results if not c.ok]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    (out / "summary.json").write_text(
        json.dumps({"checks": [c.__dict__ for c in results], "runs": [r.__dict__ | {"workdir": str(r.workdir)} for r in runs]},
                   indent=2, default=str)
    )  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
