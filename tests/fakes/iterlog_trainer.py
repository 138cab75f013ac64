"""A trainer that prints only nanoGPT-style lines: no metrics file, no peak, no torch.

Usage: iterlog_trainer.py BATCH_SIZE STEPS [anything else, ignored]

The line is nanoGPT's own format (karpathy/nanoGPT ``train.py`` line 327:
``print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%")``),
one per optimizer step. Each step waits ``ITERLOG_STEP_S`` seconds (default 0.06) times a
batch-size factor, standing for the GPU's work: the trial takes a known wall time and uses
almost no CPU, so a busy host is others' load, not its own. It reports no memory at all:
the case where fit cannot be judged.
"""

import os
import sys
import time


def main(argv: list[str]) -> int:
    batch, steps = int(argv[0]), int(argv[1])
    step_s = float(os.environ.get("ITERLOG_STEP_S", "0.06")) * (0.6 + 0.4 * batch)
    for it in range(steps):
        t0 = time.perf_counter()
        time.sleep(step_s)  # the step's work (a GPU kernel's wait), not a race
        dt = time.perf_counter() - t0
        print(f"iter {it}: loss {2.0 / (it + 1):.4f}, time {dt * 1000:.2f}ms, mfu 1.00%", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
