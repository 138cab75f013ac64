"""A fake trainer for sweep tests, driven through the ``command`` adapter's template.

Usage (the template the tests pass to ``--cmd``)::

    python sweep_trainer.py {quantization} {optimizer} {batch_size} {gradient_checkpointing} {steps}

It has a small, known memory and speed model (``model`` below, also imported by
the tests to compute the true best), so a sweep over it can be checked exactly.
It really runs: it appends one line per launch to ``$SWEEP_FAKE_LAUNCHES`` (so
tests can count launches), waits for the file `$SWEEP_FAKE_GATE` when set (so a test can catch a
trial running), sleeps ``$SWEEP_FAKE_SLEEP_S`` seconds (default 0.2)
printing Step lines, then either prints torch's OOM text and exits 1 (memory
above ``$SWEEP_FAKE_CARD_GB``, default 16) or writes ``$AUTOTUNE_METRICS_FILE``
and LTX-2's statistics block. ``$SWEEP_FAKE_HANG_ON`` (a batch size) makes that
batch size hang (for interrupt tests); ``$SWEEP_FAKE_CRASH=1`` makes every run crash.
``$SWEEP_FAKE_ARGV`` (a file) gets one JSON line per launch: the whole argv and the working folder.
"""

from __future__ import annotations

import json
import os
import sys
import time

WEIGHTS_GB = {"int2-quanto": 1.0, "int4-quanto": 2.0, "int8-quanto": 4.0, "none": 8.0}
QUANT_SLOWDOWN = {"int2-quanto": 1.3, "int4-quanto": 3.0, "int8-quanto": 1.2, "none": 1.0}
OPTIMIZER_GB = {"adamw8bit": 0.5, "adamw": 1.5}
ACT_PER_SAMPLE_GB = {True: 1.0, False: 3.0}
OVERHEAD_GB = 0.5


def model(quantization: str, optimizer: str, batch_size: int, checkpointing: bool) -> tuple[float, float]:
    """(peak GiB, samples/s) of one candidate."""
    peak = WEIGHTS_GB[quantization] + OPTIMIZER_GB[optimizer] + ACT_PER_SAMPLE_GB[checkpointing] * batch_size
    peak += OVERHEAD_GB
    step = (0.2 + 0.1 * batch_size * (1 + 0.05 * batch_size)) * QUANT_SLOWDOWN[quantization]
    step *= 1.3 if checkpointing else 1.0
    step += 0.02 if optimizer == "adamw8bit" else 0.015
    return peak, batch_size / step


def main(argv: list[str]) -> int:
    quantization, optimizer, batch, ckpt, steps = argv[:5]
    batch_size = int(batch)
    checkpointing = ckpt.lower() == "true"
    launches = os.environ.get("SWEEP_FAKE_LAUNCHES")
    if launches:
        with open(launches, "a", encoding="utf-8") as fh:
            fh.write(json.dumps([quantization, optimizer, batch_size, checkpointing, os.getpid()]) + "\n")
    seen = os.environ.get("SWEEP_FAKE_ARGV")
    if seen:  # the whole argv and the folder it ran in (the report's launch command is checked with it)
        with open(seen, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"argv": argv, "cwd": os.getcwd()}) + "\n")
    if os.environ.get("SWEEP_FAKE_CRASH") == "1":
        print(
            "Traceback (most recent call last):\nRuntimeError: the fake trainer was told to crash",
            file=sys.stderr,
        )
        return 1
    peak, sps = model(quantization, optimizer, batch_size, checkpointing)
    card = float(os.environ.get("SWEEP_FAKE_CARD_GB", "16"))
    sleep_s = float(os.environ.get("SWEEP_FAKE_SLEEP_S", "0.2"))
    hang_on = os.environ.get("SWEEP_FAKE_HANG_ON")
    print(f"loading the fake model ({quantization}, {optimizer})", flush=True)
    if hang_on and int(hang_on) == batch_size:
        while True:
            time.sleep(0.1)
    gate = os.environ.get("SWEEP_FAKE_GATE")
    if gate:  # hold the first trial until the test has seen it running (bounded: 120 s)
        deadline = time.monotonic() + 120
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
    time.sleep(sleep_s)
    if peak > card:
        print(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            f"capacity of {card:.2f} GiB of which 0.50 GiB is free. Including non-PyTorch memory, this "
            f"process has {card - 0.5:.2f} GiB memory in use.",
            file=sys.stderr,
            flush=True,
        )
        return 1
    step_time = batch_size / sps
    n = int(steps)
    for i in range(20, n + 1, 20):
        print(f"Step {i}/{n} - Loss: 0.1000, LR: 1.00e-04, Time/Step: {step_time:.2f}s, Total Time: 0h 0m")
    path = os.environ.get("AUTOTUNE_METRICS_FILE")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "step_time_s": step_time,
                    "step_time_spread_s": step_time * 0.01,
                    "samples_per_s": sps,
                    "peak_vram_gb": peak,
                    "loss": 0.1,
                },
                fh,
            )
    print("📊 Training Statistics:")
    print(f" - Total time: {sleep_s / 60:.1f} minutes")
    print(f" - Training speed: {1 / step_time:.2f} steps/second")
    print(f" - Samples/second: {sps:.2f}")
    print(f" - Peak GPU memory: {peak:.2f} GB", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
