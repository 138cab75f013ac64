"""A fake LTX-2 trainer: reads the config, prints the real trainer's lines, trains nothing.

It follows ``packages/ltx-trainer`` of Lightricks/LTX-2 at 400fd31 (the file and line of each
behaviour are cited below, as ``trainer.py:N`` for ``src/ltx_trainer/trainer.py``); none of its
code is copied. What it mimics:
- the loop runs ``(steps - initial_step) x GA`` micro-steps and bumps the optimizer-step counter at
  the start of each GA-th one (trainer.py:217-229);
- a ``Step`` line on every micro-step whose counter is a multiple of 20 (trainer.py:299-311): with
  GA > 1 each is printed GA times (the first copy times the micro-step with the optimizer step in
  it, the later copies micro-steps without one) and the first GA-1 micro-steps print ``Step 0/N``
  with ``Total Time: calculating...``; ``Time/Step`` is one micro-step x GA (trainer.py:275),
  ``Total Time`` the estimated total of the run (trainer.py:300-304);
- resume: ``model.load_checkpoint`` (a ``.safetensors`` file, or a folder: its latest
  ``*step_*.safetensors``) is loaded, and unless ``checkpoints.no_resume`` the
  ``training_state_step_N.pt`` beside it sets the first step to N, or the run dies with "No remaining
  training steps" (trainer.py:181-186, 484-566, 646-673);
- validation at ``validation.interval`` (and at step 0 unless ``skip_initial_validation``) when it has
  samples, written to ``samples/step_NNNNNN_I.mp4`` (trainer.py:210-255, validation_runner.py:260-310);
  it peaks above training (the VAE decoder and the text encoder beside the transformer);
- checkpoints at ``checkpoints.interval`` and at the end, ``checkpoints/lora_weights_step_NNNNN.safetensors``
  (``model_`` for full training) with ``training_state_step_NNNNN.pt`` beside unless
  ``save_training_state: off`` (trainer.py:937-1064); ``training_config.yaml`` in ``output_dir``
  (trainer.py:1095-1104);
- "Peak GPU memory" is the whole card's ``nvidia-smi memory.used`` (gpu_utils.py:67-90): every process
  on the card, sampled at start, every 200 micro-steps and at the end (trainer.py:148, 314-322); a
  caching allocator keeps what validation reserved, so a later sample sees it.

Layout as Rich's ``RichHandler(show_time=False)`` draws it: ``INFO     `` in front, the source
location right-aligned at the end, messages wrapped (continuations indented 9) at ``COLUMNS`` (80
when it is unset or FAKE_LTX2_WRAP=1, as when Rich ignores it).

Environment knobs for tests:
  FAKE_LTX2_STEP_TIMES  comma list of Time/Step seconds of each step's first copy, one per Step line
  FAKE_LTX2_LOSS        loss printed on every Step line (default 0.1234; "nan" works)
  FAKE_LTX2_PEAK_GB     this process's own training peak, GB (default 45.68)
  FAKE_LTX2_VALIDATION_PEAK_GB  its peak during validation (default 1.15 x the training peak)
  FAKE_LTX2_CARD_OTHER_GB  memory other processes hold on the card (default 0): in the whole-card peak
  FAKE_LTX2_WRAP=1      wrap at 80 columns whatever COLUMNS says
  FAKE_LTX2_RANK=N      put "[rank N] " in front of every line (as under accelerate)
  FAKE_LTX2_PLAIN=1     no Rich decoration
  FAKE_LTX2_PROCESSES=N print the multi-process lines of the statistics block
  FAKE_LTX2_STOP_AFTER=N exit 1 after N steps' Step lines, before the statistics block
  FAKE_LTX2_PEAK_GB_PER_SAMPLE  training GB each sample of the batch past the first adds (default 0)
  FAKE_LTX2_CARD_GB     the card's size: a phase that would reserve more dies with the real
                        trainer's CUDA OOM traceback and exit code 1 (trainer.py has no OOM handling)
  FAKE_LTX2_REAL_STEP_S  really take this long per optimizer step (sleeping): its GA micro-steps
                        share it, the one with the optimizer step in it taking OPTIMIZER_SHARE more
                        than the others; Time/Step then prints that micro-step's measured time x GA
                        to 2 decimals (trainer.py:275), the hook's events the measured optimizer
                        step, and output_dir/fake_truth.json each optimizer step's real duration
  AUTOTUNE_HOOK_FILE    where the trial-side hook writes (set by autotune when the hook is on): the
                        fake has no torch for the hook to watch, so it writes the hook's step and
                        exit events itself, with its own running peak (``max_memory_reserved_gb``)

The dataset: the ``.pt`` files under ``data.preprocessed_data_root``/latents are loaded with
torch, as datasets.py:257-270 does, and their latent shapes (frames x height x width) are written
to ``output_dir/fake_trained_on.json``: which bucket(s) the run trained on.
"""

import json
import os
import re
import sys
import textwrap
import time
import unicodedata
from pathlib import Path

import yaml

sys.path.insert(
    0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
)  # tests/fakes: the hook's line format
from hookline import hook_text

LEVEL = "INFO     "
WARNING = "WARNING  "
LINE_EVERY = 20  # trainer.py:299
MEMORY_CHECK_INTERVAL = 200  # trainer.py:73
LATER_COPY = 0.9  # a micro-step without the optimizer step is a little faster
OPTIMIZER_SHARE = 0.5  # real-time mode: the optimizer's step and zero_grad, on top of a micro-step


def cells(text):
    """Terminal cells, as Rich counts them (an emoji takes two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text, width):
    return text + " " * max(0, width - cells(text))


def emit(message, lineno, width, level=LEVEL):
    rank = os.environ.get("FAKE_LTX2_RANK")
    prefix = f"[rank {rank}] " if rank is not None else ""
    if os.environ.get("FAKE_LTX2_PLAIN") == "1":
        for line in message.split("\n"):
            print(prefix + line)
        return
    path = f"trainer.py:{lineno}"
    msg_width = width - len(level) - len(path) - 1
    rows = []
    for part in message.split("\n"):
        wrapped = textwrap.wrap(part, msg_width, break_on_hyphens=False, drop_whitespace=True) or [""]
        rows.extend(wrapped)
    for i, row in enumerate(rows):
        if i == 0:
            print(prefix + level + pad(row, msg_width) + " " + path)
        else:
            print(prefix + " " * len(level) + pad(row, msg_width + 1 + len(path)))


def section(config, name):
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def find_checkpoint(path):
    """trainer.py:646-673: a .safetensors file, or a folder's latest ``*step_*.safetensors``."""
    path = Path(path)
    if path.is_file():
        if path.suffix != ".safetensors":
            raise ValueError(f"Checkpoint file must have a .safetensors extension: {path}")
        return path
    if path.is_dir():
        found = list(path.rglob("*step_*.safetensors"))

        def step_of(p):
            try:
                return int(p.stem.split("step_")[1])
            except (IndexError, ValueError):
                return -1

        return max(found, key=step_of) if found else None
    raise ValueError(f"Invalid checkpoint path: {path}. Must be a file or directory.")


def fingerprint(config):
    model, opt, lora = section(config, "model"), section(config, "optimization"), section(config, "lora")
    return {
        "optimizer_type": opt.get("optimizer_type", "adamw"),
        "scheduler_type": opt.get("scheduler_type", "linear"),
        "training_mode": model.get("training_mode", "lora"),
        "lora_rank": lora.get("rank"),
    }


def resume_step(config, checkpoint, width):
    """trainer.py:527-566: the saved step, unless no_resume, no state file, or a changed fingerprint."""
    if section(config, "checkpoints").get("no_resume", False):
        return 0
    match = re.search(r"step_(\d+)", checkpoint.name)
    if not match:
        return 0
    state_path = checkpoint.parent / f"training_state_step_{match.group(1)}.pt"
    if not state_path.exists():
        return 0
    try:
        state = json.loads(state_path.read_text())  # the fake's own format (the real one is torch.save)
        saved = state["fingerprint"]
        step = int(state["global_step"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        emit(
            f"⚠️ Failed to load training state from {state_path}: {exc}. Starting from step 0.",
            587,
            width,
            WARNING,
        )
        return 0
    emit(f"📥 Loaded training state from {state_path}", 582, width)
    now = fingerprint(config)
    changed = [
        f"{k}: {saved.get(k)} → {now[k]}" for k in now if saved.get(k) != now[k] and now[k] is not None
    ]
    if changed:
        emit(
            f"⚠️ Training state config mismatch ({', '.join(changed)}). Starting from step 0. "
            "Set checkpoints.no_resume=true to silence this warning.",
            556,
            width,
            WARNING,
        )
        return 0
    emit(f"📌 Resuming from step {step}", 565, width)
    return step


class OutOfMemory(Exception):
    pass


class Card:
    """The card as nvidia-smi sees it: other processes plus what this one has reserved."""

    def __init__(self, training_gb, validation_gb, other_gb, capacity_gb=None):
        self.training_gb, self.validation_gb, self.other_gb = training_gb, validation_gb, other_gb
        self.capacity_gb = capacity_gb
        self.reserved = 0.6 * training_gb  # the models, loaded before train() starts
        self.peak_sampled = 0.0
        self.hook = os.environ.get("AUTOTUNE_HOOK_FILE")

    def sample(self):
        self.peak_sampled = max(self.peak_sampled, self.other_gb + self.reserved)

    def reserve(self, gb):
        if self.capacity_gb is not None and gb > self.capacity_gb:
            raise OutOfMemory(gb - self.reserved)
        self.reserved = max(self.reserved, gb)  # a caching allocator keeps what it reserved

    def train_step(self):
        self.reserve(self.training_gb)

    def validate(self):
        self.reserve(self.validation_gb)

    def event(self, kind, **fields):
        """The hook's line (trials/hook/sitecustomize.py): the running peak so far."""
        if self.hook is not None:
            record = {"event": kind, **fields, "max_memory_reserved_gb": self.reserved, "pid": os.getpid()}
            with open(self.hook, "a", encoding="utf-8") as fh:
                fh.write(hook_text(record))


def oom_exit(tried_gb, card):
    """The real trainer's death by CUDA OOM: the traceback on stderr, exit 1, no statistics."""
    print(
        "Traceback (most recent call last):\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        f"{tried_gb:.2f} GiB. GPU 0 has a total capacity of {card.capacity_gb:.2f} GiB of which "
        f"{max(0.0, card.capacity_gb - card.reserved):.2f} GiB is free.",
        file=sys.stderr,
    )
    card.event("exit", steps=-1, exception="OutOfMemoryError")
    return 1


def record_data(config, out):
    """datasets.py:257-270: each sample's latents loaded with torch; their shapes written down."""
    root = section(config, "data").get("preprocessed_data_root")
    latents = Path(root) / "latents" if root else None
    if latents is None or not latents.is_dir():
        return
    import torch

    shapes = []
    for path in sorted(latents.glob("**/*.pt")):
        data = torch.load(path, map_location="cpu", weights_only=True)
        shapes.append(list(data["latents"].shape[1:]))
    (out / "fake_trained_on.json").write_text(json.dumps({"samples": len(shapes), "shapes": shapes}))


def save_checkpoint(config, out, step, width):
    """trainer.py:937-988: the weights, then the training state beside them."""
    full = section(config, "model").get("training_mode", "lora") == "full"
    prefix = "model" if full else "lora"
    save_dir = out / "checkpoints"
    save_dir.mkdir(parents=True, exist_ok=True)
    weights = save_dir / f"{prefix}_weights_step_{step:05d}.safetensors"
    weights.write_bytes(b"fake")
    emit(f"💾 {prefix.capitalize()} weights for step {step} saved in {weights.relative_to(out)}", 981, width)
    mode = section(config, "checkpoints").get("save_training_state", "minimal")
    if mode != "off":
        state = {"global_step": step, "fingerprint": fingerprint(config), "mode": mode}
        (save_dir / f"training_state_step_{step:05d}.pt").write_text(json.dumps(state))
    return weights


def validate(config, out, step, card, width):
    """trainer.py:859-918 with validation_runner.py:260-310: one file per sample."""
    validation = section(config, "validation")
    samples = validation.get("samples") or validation.get("prompts") or []  # config.py:656-675
    if not samples:
        return
    card.validate()
    samples_dir = out / "samples"
    samples_dir.mkdir(parents=True, exist_ok=True)
    for i in range(len(samples)):
        (samples_dir / f"step_{step:06d}_{i + 1}.mp4").write_bytes(b"fake")
    emit(f"🎥 Validation samples for step {step} saved in samples", 310, width)


def estimate(elapsed, done, remaining):
    """trainer.py:300-306: the estimated total of the run, or ``calculating...`` before a step."""
    if done <= 0:
        return "calculating..."
    total = elapsed / done * remaining
    return f"{total // 3600:.0f}h {(total % 3600) // 60:.0f}m"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--disable-progress-bars" not in sys.argv or len(args) != 1:
        print("usage: train.py CONFIG --disable-progress-bars", file=sys.stderr)
        return 2
    config = yaml.safe_load(Path(args[0]).read_text())
    opt = section(config, "optimization")
    steps, batch, accum = (
        opt.get("steps", 3000),
        opt.get("batch_size", 2),
        opt.get("gradient_accumulation_steps", 1),
    )
    honoured = os.environ.get("COLUMNS") and os.environ.get("FAKE_LTX2_WRAP") != "1"
    width = int(os.environ["COLUMNS"]) if honoured else 80
    training_gb = float(os.environ.get("FAKE_LTX2_PEAK_GB", "45.68"))
    training_gb += float(os.environ.get("FAKE_LTX2_PEAK_GB_PER_SAMPLE", "0")) * (batch - 1)
    validation_gb = float(os.environ.get("FAKE_LTX2_VALIDATION_PEAK_GB", str(1.15 * training_gb)))
    capacity = os.environ.get("FAKE_LTX2_CARD_GB")
    card = Card(
        training_gb,
        validation_gb,
        float(os.environ.get("FAKE_LTX2_CARD_OTHER_GB", "0")),
        float(capacity) if capacity else None,
    )
    try:
        return train(config, card, steps, batch, accum, width)
    except OutOfMemory as exc:
        return oom_exit(exc.args[0], card)


def train(config, card, steps, batch, accum, width):
    validation, checkpoints = section(config, "validation"), section(config, "checkpoints")
    times = [float(t) for t in os.environ.get("FAKE_LTX2_STEP_TIMES", "2.5,1.0,1.0,1.0").split(",")]
    loss = os.environ.get("FAKE_LTX2_LOSS", "0.1234")
    stop_after = int(os.environ.get("FAKE_LTX2_STOP_AFTER", "0"))

    initial_step = 0
    load = section(config, "model").get("load_checkpoint")
    if load:
        checkpoint = find_checkpoint(load)
        if checkpoint is None:
            emit(f"⚠️ Could not find checkpoint at {load}", 492, width, WARNING)
        else:
            emit(f"📥 Loading checkpoint from {checkpoint}", 497, width)
            emit("✅ LoRA checkpoint loaded successfully", 524, width)
            initial_step = resume_step(config, checkpoint, width)

    card.sample()  # start_mem (trainer.py:148)
    out = Path(config.get("output_dir", "outputs"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "training_config.yaml").write_text(yaml.safe_dump(config))
    record_data(config, out)
    emit("💾 Training configuration saved to: training_config.yaml", 1104, width)
    remaining = steps - initial_step
    if remaining <= 0:
        raise ValueError(
            f"No remaining training steps: initial_step={initial_step} >= target_steps={steps}. Nothing to train."
        )
    if initial_step:
        emit(f"🚀 Resuming training from step {initial_step} → {steps}", 189, width)
    else:
        emit("🚀 Starting training...", 191, width)
    emit("Progress bars disabled. Intermediate status messages will be logged instead.", 201, width, WARNING)

    interval = validation.get("interval")
    if interval and not validation.get("skip_initial_validation", False):
        validate(config, out, initial_step, card, width)
    global_step = initial_step
    elapsed = 0.0
    lines = 0
    real_step = float(os.environ.get("FAKE_LTX2_REAL_STEP_S", "0") or 0)
    micro_s = real_step / (accum + OPTIMIZER_SHARE) if real_step else 0.0
    truth = []
    last_step_end = time.perf_counter()
    for micro in range(remaining * accum):
        optimizer_step = (micro + 1) % accum == 0
        if optimizer_step:
            global_step += 1
        window = max(0, (global_step - 1) // LINE_EVERY)
        first_copy = times[min(window, len(times) - 1)]
        step_time = first_copy if optimizer_step else LATER_COPY * first_copy
        if global_step == 0:
            step_time = 0.625 * times[0]  # before the first optimizer step: warm-up micro-steps
        if real_step:  # trainer.py:275: this micro-step's own time (no synchronize) x GA
            started = time.perf_counter()
            time.sleep(micro_s * (1 + OPTIMIZER_SHARE) if optimizer_step else micro_s)
            step_time = (time.perf_counter() - started) * accum
        card.train_step()
        if optimizer_step:
            if real_step:
                now = time.perf_counter()
                first_copy = now - last_step_end  # what the hook measures: optimizer step to step
                truth.append(first_copy)
                last_step_end = now
            elapsed += first_copy  # one optimizer step takes what its first copy says
            card.event("step", step=global_step - initial_step, step_time_s=first_copy)
        if optimizer_step and interval and global_step % interval == 0:
            validate(config, out, global_step, card, width)
        if optimizer_step and checkpoints.get("interval") and global_step % checkpoints["interval"] == 0:
            save_checkpoint(config, out, global_step, width)
        if global_step % LINE_EVERY == 0:
            total = estimate(elapsed, global_step - initial_step, remaining)
            emit(
                f"Step {global_step}/{steps} - Loss: {loss}, LR: 1.00e-04, "
                f"Time/Step: {step_time:.2f}s, Total Time: {total}",
                307,
                width,
            )
            if optimizer_step and global_step > 0:
                lines += 1
                if stop_after and lines >= stop_after:
                    print(
                        "Traceback (most recent call last):\nRuntimeError: stopped on request",
                        file=sys.stderr,
                    )
                    return 1
        if micro % MEMORY_CHECK_INTERVAL == 0:
            card.sample()
    card.sample()  # end_mem
    if truth:
        (out / "fake_truth.json").write_text(json.dumps({"optimizer_step_s": truth}))
    total_s = max(elapsed, 1.0)
    steps_per_s = remaining / total_s
    save_checkpoint(config, out, global_step, width)
    processes = int(os.environ.get("FAKE_LTX2_PROCESSES", "1"))
    block = [
        "📊 Training Statistics:",
        f" - Total time: {total_s / 60:.1f} minutes",
        f" - Training speed: {steps_per_s:.2f} steps/second",
        f" - Samples/second: {steps_per_s * batch * processes:.2f}",
        f" - Peak GPU memory: {card.peak_sampled:.2f} GB",
    ]
    if processes > 1:
        block += [f" - Number of processes: {processes}", f" - Global batch size: {batch * processes}"]
    emit("\n".join(block), 935, width)
    card.event("exit", steps=remaining, exception=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
