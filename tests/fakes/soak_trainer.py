"""The fastest trainer there is, for soak tests: it reports one measurement and exits.

Usage (through the ``command`` adapter's template)::

    python soak_trainer.py {quantization} {optimizer} {batch_size} {gradient_checkpointing}

Memory is tiny and throughput grows with every knob, so every candidate fits and may
win. Writes ``$AUTOTUNE_METRICS_FILE`` and prints a few lines (``$SOAK_PRINT_KB``: that
many kB more). Stdlib only (fast start-up).
"""

import json
import os
import sys

SPEED = {"int2-quanto": 0.7, "int4-quanto": 0.8, "int8-quanto": 0.9, "none": 1.0}


def speed(quantization: str) -> float:
    """Known values, or ``qNNN``: NNN orders them (each a little faster than the one before)."""
    if quantization in SPEED:
        return SPEED[quantization]
    return 1.0 + int(quantization[1:]) / 100 if quantization[1:].isdigit() else 1.0


def main(argv: list[str]) -> int:
    quantization, optimizer, batch, ckpt = argv[:4]
    batch_size = int(batch)
    step_s = 0.1 * batch_size**0.9 / speed(quantization)
    step_s *= 1.2 if ckpt.lower() == "true" else 1.0
    step_s *= 1.05 if optimizer == "adamw8bit" else 1.0
    peak = 0.001 * (1 + batch_size) ** 0.5
    for step in range(3):
        print(f"step {step + 1}/3 loss=0.5", flush=True)
    chatty_kb = int(os.environ.get("SOAK_PRINT_KB", "0"))  # for full-disk tests: a big log
    for _ in range(chatty_kb):
        print("x" * 1023, flush=True)
    out = os.environ.get("AUTOTUNE_METRICS_FILE")
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"step_time_s": step_s, "peak_vram_gb": peak, "loss": 0.5}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
