"""The run's phases after training, kept small: a validation-like pass and the final save.

LTX-2 validates by denoising a clip with the trained transformer, ``inference_steps`` forwards
without gradients (validation_runner.py:226-310 in Lightricks/LTX-2 at 400fd31), and saves the
trainable weights at the end (trainer.py:937-988). The reference trainer mimics both so a trial's
time overhead for them can be measured: ``reference.validation_steps`` forwards (0: no pass) on
one sample of the training shape, then the save when ``output_dir`` is set.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import torch
from torch import nn

from trials.reference.config import TrainConfig


def validation_pass(
    model: nn.Module, cfg: TrainConfig, device: torch.device, dtype: torch.dtype | None
) -> float:
    """``cfg.validation_steps`` denoising forwards without gradients; the seconds it took."""
    if cfg.validation_steps <= 0:
        return 0.0
    started = time.perf_counter()
    gen = torch.Generator(device=device).manual_seed(cfg.seed + 2)
    data = cfg.data
    latents = torch.randn((1, *data.latent_shape), generator=gen, device=device)
    text = torch.randn((1, data.text_tokens, data.text_dim), generator=gen, device=device)
    model.eval()
    with torch.no_grad():
        tokens = model.patchify(latents)  # type: ignore[operator]
        for i in range(cfg.validation_steps):
            sigma = torch.full((1,), 1.0 - i / cfg.validation_steps, device=device)
            with torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext():
                pred = model(tokens, sigma, text)
            tokens = tokens - pred.float() / cfg.validation_steps
    model.train()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def save_weights(model: nn.Module, out: Path, steps: int) -> tuple[Path, float]:
    """The trainable weights to ``out/checkpoints``; the path and the seconds it took."""
    started = time.perf_counter()
    folder = out / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    weights = {name: p.detach().cpu() for name, p in model.named_parameters() if p.requires_grad}
    path = folder / f"lora_weights_step_{steps:05d}.pt"
    torch.save(weights, path)
    return path, time.perf_counter() - started
