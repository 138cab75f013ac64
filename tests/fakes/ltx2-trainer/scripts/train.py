"""A fake LTX-2 trainer: reads the config, prints the real trainer's lines exactly, trains nothing.

Layout as Rich's ``RichHandler(show_time=False)`` draws it: ``INFO     `` in front, the
source location right-aligned at the end, messages wrapped (continuations indented 9)
at ``COLUMNS`` (80 when it is unset or FAKE_LTX2_WRAP=1, as when Rich ignores it).
Environment knobs for tests:
  FAKE_LTX2_STEP_TIMES  comma list of Time/Step seconds, one per Step line (every 20 steps)
  FAKE_LTX2_LOSS        loss printed on every Step line (default 0.1234; "nan" works)
  FAKE_LTX2_PEAK_GB     the statistics block's peak memory (default 45.68)
  FAKE_LTX2_WRAP=1      wrap at 80 columns whatever COLUMNS says
  FAKE_LTX2_RANK=N      put "[rank N] " in front of every line (as under accelerate)
  FAKE_LTX2_PLAIN=1     no Rich decoration
  FAKE_LTX2_PROCESSES=N print the multi-process lines of the statistics block
  FAKE_LTX2_STOP_AFTER=N exit 1 after N Step lines, before the statistics block
"""

import os
import sys
import textwrap
import unicodedata
from pathlib import Path

import yaml

LEVEL = "INFO     "


def cells(text):
    """Terminal cells, as Rich counts them (an emoji takes two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text, width):
    return text + " " * max(0, width - cells(text))


def emit(message, lineno, width):
    rank = os.environ.get("FAKE_LTX2_RANK")
    prefix = f"[rank {rank}] " if rank is not None else ""
    if os.environ.get("FAKE_LTX2_PLAIN") == "1":
        for line in message.split("\n"):
            print(prefix + line)
        return
    path = f"trainer.py:{lineno}"
    msg_width = width - len(LEVEL) - len(path) - 1
    rows = []
    for part in message.split("\n"):
        wrapped = textwrap.wrap(part, msg_width, break_on_hyphens=False, drop_whitespace=True) or [""]
        rows.extend(wrapped)
    for i, row in enumerate(rows):
        if i == 0:
            print(prefix + LEVEL + pad(row, msg_width) + " " + path)
        else:
            print(prefix + " " * len(LEVEL) + pad(row, msg_width + 1 + len(path)))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--disable-progress-bars" not in sys.argv or len(args) != 1:
        print("usage: train.py CONFIG --disable-progress-bars", file=sys.stderr)
        return 2
    config = yaml.safe_load(Path(args[0]).read_text())
    opt = config["optimization"]
    steps, batch, accum = opt["steps"], opt["batch_size"], opt["gradient_accumulation_steps"]
    honoured = os.environ.get("COLUMNS") and os.environ.get("FAKE_LTX2_WRAP") != "1"
    width = int(os.environ["COLUMNS"]) if honoured else 80
    times = [float(t) for t in os.environ.get("FAKE_LTX2_STEP_TIMES", "2.5,1.0,1.0,1.0").split(",")]
    loss = os.environ.get("FAKE_LTX2_LOSS", "0.1234")
    stop_after = int(os.environ.get("FAKE_LTX2_STOP_AFTER", "0"))
    emit(f"Training for {steps} steps with batch size {batch} and {accum} accumulation step(s)", 402, width)
    total_s = 0.0
    for lines, step in enumerate(range(20, steps + 1, 20), start=1):
        t = times[min(lines - 1, len(times) - 1)]
        total_s += 20 * t
        h, m = int(total_s // 3600), int(total_s % 3600 // 60)
        emit(
            f"Step {step}/{steps} - Loss: {loss}, LR: 1.00e-04, Time/Step: {t:.2f}s, Total Time: {h}h {m}m",
            612,
            width,
        )
        if stop_after and lines >= stop_after:
            print("Traceback (most recent call last):\nRuntimeError: stopped on request", file=sys.stderr)
            return 1
    out = Path(config["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "lora_weights.safetensors").write_bytes(b"fake")
    total_s = max(total_s, 1.0)
    steps_per_s = steps / total_s
    processes = int(os.environ.get("FAKE_LTX2_PROCESSES", "1"))
    block = [
        "📊 Training Statistics:",
        f" - Total time: {total_s / 60:.1f} minutes",
        f" - Training speed: {steps_per_s:.2f} steps/second",
        f" - Samples/second: {steps_per_s * batch * processes:.2f}",
        f" - Peak GPU memory: {float(os.environ.get('FAKE_LTX2_PEAK_GB', '45.68')):.2f} GB",
    ]
    if processes > 1:
        block += [f" - Number of processes: {processes}", f" - Global batch size: {batch * processes}"]
    emit("\n".join(block), 733, width)
    return 0


if __name__ == "__main__":
    sys.exit(main())
