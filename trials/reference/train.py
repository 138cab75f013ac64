"""The reference trainer's run: build, quantize, add LoRA, train, report like the LTX-2 trainer.

Output formats are the LTX-2 trainer's (see LTX2-TRAINER.md): ``Step N/M - Loss: ...`` lines every
``reference.log_interval`` optimizer steps with ``--disable-progress-bars``, then the
``📊 Training Statistics:`` block. An OOM is not handled, as in LTX-2: the traceback goes to stderr
and the exit code is 1. ``$AUTOTUNE_METRICS_FILE``, when set, receives one JSON object.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trials.reference.config import TrainConfig
from trials.reference.memory import GIB, DeviceMemory
from trials.reference.model import VideoTransformer, add_lora, trainable_parameters
from trials.reference.phases import save_weights, validation_pass


def say(message: str) -> None:
    print(message, flush=True)


def resolve_device(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError(
                "reference.device is 'cuda' but torch sees no CUDA device; use 'auto' or 'cpu'"
            )
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _import_bitsandbytes(device: torch.device) -> Any:
    """Import bitsandbytes only when ``adamw8bit`` is asked for.

    On CPU its fallback kernels are wrapped in ``torch.compile`` at import time, which pulls in
    TorchDynamo and Inductor (about 4 s here) and compiles on first use; with ``torch.compile``
    made a no-op during the import the same kernels run eagerly and the 8-bit state is unchanged.
    """
    if device.type != "cpu":
        import bitsandbytes

        return bitsandbytes
    real_compile = torch.compile

    def eager(model: Any = None, **_: Any) -> Any:
        return model if model is not None else (lambda fn: fn)

    torch.compile = eager
    try:
        import bitsandbytes
    finally:
        torch.compile = real_compile
    return bitsandbytes


def _spare_dynamo_import() -> int:
    """Keep ``torch._dynamo`` unimported: it costs about 2.5 s of CPU per trial and we never compile.

    Functions torch (and quanto, bitsandbytes) wrap with ``torch._disable_dynamo`` import the
    compiler on their first call only to disable it around themselves; the wrapper skips that when
    the function already carries its "disabled" twin, so we give each one itself as its twin.
    Pure start-up time: behaviour is unchanged unless something compiles, which nothing here does.
    Returns how many functions were marked (0 when torch's internals differ: then nothing happens).
    """
    if "torch._dynamo" in sys.modules:
        return 0
    try:
        import gc
        import types

        from torch import _compile

        inner_code = _compile._disable_dynamo(lambda: None).__code__
        slot = inner_code.co_freevars.index("fn")
        marked = 0
        for obj in gc.get_objects():
            if type(obj) is types.FunctionType and obj.__code__ is inner_code and obj.__closure__:
                fn = obj.__closure__[slot].cell_contents
                if getattr(fn, "__dynamo_disable", None) is None:
                    fn.__dynamo_disable = fn
                    marked += 1
        return marked
    except Exception:  # an optimization only: never let it break a run
        return 0


QUANTO_TYPES = {
    "int8-quanto": "qint8",
    "int4-quanto": "qint4",
    "int2-quanto": "qint2",
    "fp8-quanto": "qfloat8_e4m3fn",
    "fp8uz-quanto": "qfloat8_e4m3fnuz",
}


def quantize_blocks(model: VideoTransformer, quantization: str) -> None:
    """Quantize the transformer blocks' Linear weights with optimum-quanto and freeze them."""
    from optimum import quanto

    qtype = getattr(quanto, QUANTO_TYPES[quantization])
    quanto.quantize(model.transformer_blocks, weights=qtype)
    quanto.freeze(model.transformer_blocks)


class SyntheticLatents:
    """A deterministic video-latent dataset: sample ``i`` is the same for a seed, whatever the order.

    Each sample is a smooth moving pattern plus noise (something a denoiser can learn) and its own
    text embedding, generated on the fly so the data costs no memory until it is in a batch.
    """

    def __init__(self, cfg: TrainConfig) -> None:
        self.shape = cfg.data
        self.seed = cfg.seed

    def __len__(self) -> int:
        return self.shape.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.shape
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        phase = torch.rand(s.channels, 1, 1, 1, generator=gen) * 6.283
        f = torch.arange(s.frames).view(1, -1, 1, 1)
        y = torch.linspace(0, 3.1416, s.height).view(1, 1, -1, 1)
        x = torch.linspace(0, 3.1416, s.width).view(1, 1, 1, -1)
        pattern = torch.sin(x * 2 + y + phase + 0.3 * f)
        latents = pattern + 0.1 * torch.randn(s.latent_shape, generator=gen)
        text = torch.randn(s.text_tokens, s.text_dim, generator=gen)
        return latents, text

    def batches(self, batch_size: int, device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Shuffled batches forever (a fresh seeded order each epoch); incomplete batches are dropped."""
        epoch = 0
        while True:
            order = torch.randperm(len(self), generator=torch.Generator().manual_seed(self.seed + epoch))
            for start in range(0, len(self) - batch_size + 1, batch_size):
                items = [self[int(i)] for i in order[start : start + batch_size]]
                latents = torch.stack([a for a, _ in items]).to(device)
                text = torch.stack([b for _, b in items]).to(device)
                yield latents, text
            epoch += 1


def lr_lambda(kind: str, total: int, params: dict[str, Any]) -> Callable[[int], float]:
    """The LR factor per step for LTX-2's scheduler names (no warm-up: LTX-2 adds none by default)."""
    power = float(params.get("power", 1.0))

    def factor(step: int) -> float:
        progress = min(step / max(total, 1), 1.0)
        if kind == "constant":
            return 1.0
        if kind == "linear":
            return 1.0 - progress
        if kind == "polynomial":
            return (1.0 - progress) ** power
        if kind == "cosine_with_restarts":
            cycles = int(params.get("num_cycles", 1))
            progress = (progress * cycles) % 1.0
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def format_total(seconds: float) -> str:
    """LTX-2's ``Total Time`` field: whole hours and minutes."""
    minutes = int(seconds // 60)
    return f"{minutes // 60}h {minutes % 60}m"


def step_line(step: int, total: int, loss: float, lr: float, step_time: float, elapsed: float) -> str:
    return (
        f"Step {step}/{total} - Loss: {loss:.4f}, LR: {lr:.2e}, Time/Step: {step_time:.2f}s, "
        f"Total Time: {format_total(elapsed)}"
    )


def statistics_block(total_s: float, steps_per_s: float, samples_per_s: float, peak_gb: float) -> str:
    return (
        "📊 Training Statistics:\n"
        f" - Total time: {total_s / 60:.1f} minutes\n"
        f" - Training speed: {steps_per_s:.2f} steps/second\n"
        f" - Samples/second: {samples_per_s:.2f}\n"
        f" - Peak GPU memory: {peak_gb:.2f} GB"
    )


def steady_state(times: list[float], warmup: int) -> list[float]:
    """Step times without the warm-up steps (all of them when the run is too short to drop any)."""
    return times[warmup:] if len(times) > warmup else times


def run(cfg: TrainConfig, *, progress_bars: bool) -> dict[str, Any]:
    """Train as configured; return the metrics written to ``$AUTOTUNE_METRICS_FILE``."""
    started = time.perf_counter()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    memory = DeviceMemory(device, cfg.emulated_vram_gb)
    say(f"Device: {device} ({memory.note})")
    amp_dtype: torch.dtype | None = None
    if cfg.mixed_precision != "no":
        if device.type == "cuda":
            amp_dtype = torch.bfloat16 if cfg.mixed_precision == "bf16" else torch.float16
        else:
            say(f"mixed_precision_mode {cfg.mixed_precision} applies on CUDA only: training in fp32 on CPU")

    model = VideoTransformer(cfg.model, cfg.data)
    if cfg.training_mode == "lora" and amp_dtype is not None:
        model.transformer_blocks.to(amp_dtype)  # the frozen base weights live in half precision, as in LTX-2
    if cfg.quantization:
        quantize_blocks(model, cfg.quantization)
    if cfg.training_mode == "lora":
        wrapped = add_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_targets)
        if not wrapped:
            raise ValueError(f"lora.target_modules {list(cfg.lora_targets)} matched no module of the model")
    model.gradient_checkpointing = cfg.checkpointing
    total_params = sum(p.numel() for p in model.parameters())
    trainable = list(trainable_parameters(model))
    say(
        f"Model: {total_params / 1e6:.1f}M parameters, {sum(p.numel() for p in trainable) / 1e6:.2f}M trainable "
        f"({cfg.training_mode}, quantization: {cfg.quantization or 'none'}, optimizer: {cfg.optimizer}, "
        f"batch: {cfg.batch_size}x{cfg.grad_accum}, gradient checkpointing: {cfg.checkpointing})"
    )

    bnb = _import_bitsandbytes(device) if cfg.optimizer == "adamw8bit" else None
    model.to(device)
    if device.type == "cpu":
        _spare_dynamo_import()
    memory.start(model)
    try:
        if bnb is not None:
            optimizer = bnb.optim.AdamW8bit(trainable, lr=cfg.learning_rate)
        else:
            optimizer = torch.optim.AdamW(trainable, lr=cfg.learning_rate)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda(cfg.scheduler, cfg.steps, cfg.scheduler_params)
        )
        scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None
        data = SyntheticLatents(cfg).batches(cfg.batch_size, device)
        gen = torch.Generator(device=device).manual_seed(cfg.seed + 1)
        model.train()
        step_times: list[float] = []
        step_cpu: list[float] = []
        losses: list[float] = []
        train_start = time.perf_counter()
        for step in range(1, cfg.steps + 1):
            t0 = time.perf_counter()
            c0 = time.process_time()
            step_loss = 0.0
            for _ in range(cfg.grad_accum):
                latents, text = next(data)
                tokens = model.patchify(latents)
                noise = torch.randn(tokens.shape, generator=gen, device=device)
                sigma = torch.sigmoid(torch.randn(tokens.shape[0], generator=gen, device=device))
                noisy = (1 - sigma[:, None, None]) * tokens + sigma[:, None, None] * noise
                with torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext():
                    pred = model(noisy, sigma, text)
                loss = F.mse_loss(pred.float(), noise - tokens) / cfg.grad_accum
                (scaler.scale(loss) if scaler else loss).backward()
                step_loss += float(loss.detach())
                del latents, text, tokens, noise, noisy, pred, loss
            if scaler:
                scaler.unscale_(optimizer)
            if cfg.max_grad_norm is not None:
                nn.utils.clip_grad_norm_(trainable, cfg.max_grad_norm)
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            now = time.perf_counter()
            step_times.append(now - t0)
            step_cpu.append(time.process_time() - c0)
            losses.append(step_loss)
            if memory.counting and step == cfg.memory_steps and step < cfg.steps:
                memory.stop()
                say(
                    f"Memory: counted exactly for the first {step} steps (peak {memory.peak_bytes() / 2**20:.1f} MiB); "
                    "later steps repeat the same allocations and run uncounted, at full speed"
                )
            if progress_bars:
                print(f"\rTraining {step}/{cfg.steps}", end="", file=sys.stderr, flush=True)
            elif step % cfg.log_interval == 0 or step == cfg.steps:
                lr = float(scheduler.get_last_lr()[0])
                say(step_line(step, cfg.steps, step_loss, lr, step_times[-1], now - train_start))
        train_s = time.perf_counter() - train_start
        validation_s = validation_pass(model, cfg, device, amp_dtype)
        if cfg.validation_steps:
            say(f"Validation pass: {cfg.validation_steps} forwards in {validation_s:.2f}s")
    finally:
        memory.stop()
    if progress_bars:
        print(file=sys.stderr)

    save_s = None
    if cfg.output_dir is not None:
        path, save_s = save_weights(model, cfg.output_dir, cfg.steps)
        say(f"Saved final checkpoint to {path}")

    samples_per_step = cfg.batch_size * cfg.grad_accum
    # Steps run under the CPU memory counter are slower (a Python hook on every op): not steady state.
    counted = (cfg.memory_steps or cfg.steps) if device.type == "cpu" else 0
    warmup = max(cfg.warmup_steps, counted)
    steady = steady_state(step_times, warmup)
    step_time = statistics.fmean(steady)  # the time the steps took (a median misreads uneven steps)
    peak_gb = memory.peak_gb()
    total_s = time.perf_counter() - started
    say(statistics_block(total_s, cfg.steps / train_s, cfg.steps * samples_per_step / train_s, peak_gb))
    return {
        "step_time_s": step_time,
        "step_times_s": step_times,
        "warmup_steps": len(step_times) - len(steady),
        "samples_per_s": samples_per_step / step_time,
        "peak_vram_gb": peak_gb,
        "peak_vram_allocated_gb": memory.allocated_peak_bytes() / GIB,
        "peak_vram_source": "torch.cuda.max_memory_reserved"
        if device.type == "cuda"
        else "emulated card (live tensor bytes)",
        "emulated_vram_gb": cfg.emulated_vram_gb,
        "losses": losses,
        "loss": losses[-1],
        "device": str(device),
        "total_time_s": total_s,
        "process_cpu_s": time.process_time(),
        "step_cpu_s": statistics.median(steady_state(step_cpu, warmup)),
        "train_s": train_s,
        "validation_s": validation_s,
        "save_s": save_s,
    }


def write_metrics(metrics: dict[str, Any]) -> None:
    """Write ``$AUTOTUNE_METRICS_FILE`` if autotune set it (NaN losses are written as NaN)."""
    target = os.environ.get("AUTOTUNE_METRICS_FILE")
    if not target:
        return
    path = Path(target)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(metrics, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
