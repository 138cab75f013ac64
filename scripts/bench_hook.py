#!/usr/bin/env python3
"""The trial-side hook's overhead per optimizer step, on CPU, side by side in one run.

A small real training script (an MLP fed by a DataLoader; it times its own steps with
``time.perf_counter``, knowing nothing of autotune) runs as a subprocess in each mode:

- ``plain``: no hook;
- ``hook``: the hook on (step times, loss, data-loader batches), no card;
- ``hook + card (3 counted)``: ``AUTOTUNE_EMULATED_VRAM_GB`` set, the default: the card counts the
  first 3 steps, the rest run plain (the ratio is over the steps after those);
- ``hook + card (every step)``: ``AUTOTUNE_EMULATED_COUNT_STEPS=0``: every op counted.

The modes run interleaved, ``--rounds`` times each; the figure per mode is the median over rounds
of each run's median step time (steps after the warm-up), in wall time and in the process's own CPU
time (``time.process_time``: robust to other load on a shared host). Usage:

    python scripts/bench_hook.py [--steps 80] [--rounds 5] [--hidden 512] [--batch 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HOOK_DIR = Path(__file__).resolve().parent.parent / "trials" / "hook"

TRAIN = """
import sys, time
import torch
steps, hidden, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(
    torch.nn.Linear(64, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden), torch.nn.GELU(),
    torch.nn.Linear(hidden, 1),
)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(batch * 8, 64)
y = x.sum(dim=1, keepdim=True)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch, shuffle=True)
done = 0
while done < steps:
    it = iter(loader)
    while done < steps:
        start, cpu = time.perf_counter(), time.process_time()
        try:
            xb, yb = next(it)
        except StopIteration:
            break
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step_time {time.perf_counter() - start:.9f} {time.process_time() - cpu:.9f}", flush=True)
        done += 1
"""

MODES: dict[str, dict[str, str] | None] = {
    "plain": None,
    "hook": {},
    "hook + card (3 counted)": {"AUTOTUNE_EMULATED_VRAM_GB": "4"},
    "hook + card (every step)": {"AUTOTUNE_EMULATED_VRAM_GB": "4", "AUTOTUNE_EMULATED_COUNT_STEPS": "0"},
}
WARMUP = 10


def run(
    script: Path, mode: dict[str, str] | None, args: argparse.Namespace, folder: Path
) -> tuple[float, float]:
    """One run's median step time (s), wall and CPU, after the warm-up (and the card's counted steps)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_") and k != "PYTHONPATH"}
    if mode is not None:
        env.update({"PYTHONPATH": str(HOOK_DIR), "AUTOTUNE_HOOK_FILE": str(folder / "hook.jsonl"), **mode})
    proc = subprocess.run(
        [sys.executable, str(script), str(args.steps), str(args.hidden), str(args.batch)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the bench script failed:\n{proc.stderr}")
    rows = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("step_time")]
    wall = statistics.median(float(r[0]) for r in rows[WARMUP:])
    cpu = statistics.median(float(r[1]) for r in rows[WARMUP:])
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    if args.steps <= WARMUP:
        parser.error(f"--steps must be more than the {WARMUP} warm-up steps")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        script = folder / "train.py"
        script.write_text(TRAIN, encoding="utf-8")
        for _ in range(args.rounds):
            for name, mode in MODES.items():
                (folder / "hook.jsonl").unlink(missing_ok=True)
                results[name].append(run(script, mode, args, folder))

    def median(name: str, which: int) -> float:
        return statistics.median(r[which] for r in results[name])

    print(
        f"MLP 64-{args.hidden}-{args.hidden}-1, batch {args.batch}, AdamW, 1 thread, CPU; {args.steps} steps "
        f"x {args.rounds} rounds, median step after {WARMUP} warm-up steps (CPU time: this process's own, "
        "so other load on the host does not count)"
    )
    print(f"{'mode':26} {'wall ms/step':>13} {'vs plain':>9} {'CPU ms/step':>12} {'vs plain':>9}")
    for name in results:
        wall, cpu = median(name, 0), median(name, 1)
        print(
            f"{name:26} {wall * 1000:13.3f} {wall / median('plain', 0):8.2f}x "
            f"{cpu * 1000:12.3f} {cpu / median('plain', 1):8.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
