"""The fake ai-toolkit's model of one job: device memory, host memory and step time from its knobs.

Not the real trainer's code: a small model with the real knobs' directions, for tests. The test of
the sweep imports it to brute-force the winner it expects. Figures are GB (decimal, as the
emulated card) and seconds, for a 12B-parameter transformer (Flux-sized) LoRA at 1024 px.

- Weights: 2 bytes per parameter in bf16; ``qfloat8`` 1; ``uint4`` 0.5 and ``uint3`` 0.375 plus
  their scales (toolkit/util/quantize.py:42-72 @ 27a03a9). Dequantizing costs time: the leaner the
  slower.
- Layer offloading keeps ``layer_offloading_transformer_percent`` of the transformer's linear layers
  in host RAM and streams them in per use (toolkit/memory_management/manager.py:78-150), so that
  share leaves the card, lands in host RAM, and costs a transfer per forward and backward.
  The transfer hides behind compute when most layers stream (the prefetch of one layer overlaps the
  next one's compute); with a scattered half the card waits on each one. So 0.75 beats 0.5 and
  0.25 (as SeedVR2#153 found 36 swapped blocks faster than 32): speed is not monotone in the knob.
- ``low_vram`` keeps the text encoder and VAE in host RAM (flux2_model.py:180-182 moves the
  transformer to CPU while loading; the encoders stay there), a little slower per step.
- Gradient checkpointing keeps a quarter of the activations and recomputes the rest (30 % slower).
- AdamW keeps two fp32 states per LoRA parameter, AdamW8bit two bytes (bitsandbytes).
"""

from __future__ import annotations

CONTEXT_GB = 1.05  # CUDA context and allocator slack
TRANSFORMER_PARAMS_B = 12.0  # billions
BYTES_PER_PARAM = {"none": 2.0, "qfloat8": 1.0 + 0.02, "uint4": 0.5 + 0.06, "uint3": 0.375 + 0.06}
QUANT_SLOWDOWN = {"none": 1.0, "qfloat8": 1.2, "uint4": 1.45, "uint3": 1.6}
TEXT_ENCODER_GB = 3.0  # on the card unless low_vram
LORA_GB = 0.6  # LoRA weights (bf16), the same again as gradients
ADAM_STATES_GB = {"adamw": 2.4, "adamw8bit": 0.6}
ADAM_STEP_S = {"adamw": 0.0, "adamw8bit": 0.03}
ACTIVATIONS_GB = 6.4  # per sample at 1024 px, one frame, no checkpointing
CHECKPOINTED_SHARE = 0.25
CHECKPOINT_SLOWDOWN = 1.3
SAMPLE_S = 1.0  # compute per sample at 1024 px, one frame, bf16
OFFLOAD_BUFFER_GB = 0.5  # the streamed layer on the card
PCIE_GB_PER_S = 12.0
STEP_OVERHEAD_S = 1.0  # per micro-step: data loading, launches, the noise sampling
LOW_VRAM_SLOWDOWN = 1.04
#: Host RAM the fake really allocates per modelled GB (a few MB, so RSS is real but small).
HOST_MB_PER_GB = 4


def hidden_share(percent: float) -> float:
    """How much of the offload transfer hides behind compute: most when most layers stream (each
    one's prefetch overlaps the previous one's compute), less when every layer streams (nothing
    resident to compute while the first ones load), least when a scattered few do."""
    if percent >= 0.9:
        return 0.4
    return 0.9 if percent >= 0.7 else 0.3


def job_model(
    *,
    qtype: str,
    percent: float,
    low_vram: bool,
    checkpointing: bool,
    optimizer: str,
    batch: int,
    accum: int = 1,
    resolution: int = 1024,
    frames: int = 1,
) -> dict[str, float]:
    """``static_gb`` (loaded before training), ``peak_gb`` (during a step), ``host_gb``, ``step_s``."""
    weights = TRANSFORMER_PARAMS_B * BYTES_PER_PARAM[qtype]
    offloaded = weights * percent
    static = CONTEXT_GB + weights - offloaded + (OFFLOAD_BUFFER_GB if percent > 0 else 0.0) + LORA_GB
    static += 0.0 if low_vram else TEXT_ENCODER_GB
    size = (resolution / 1024) ** 2 * frames
    activations = ACTIVATIONS_GB * size * batch * (CHECKPOINTED_SHARE if checkpointing else 1.0)
    peak = static + LORA_GB + ADAM_STATES_GB[optimizer] + activations
    host = offloaded + (TEXT_ENCODER_GB if low_vram else 0.0)
    compute = (
        SAMPLE_S * size * batch * QUANT_SLOWDOWN[qtype] * (CHECKPOINT_SLOWDOWN if checkpointing else 1.0)
    )
    transfer = 2 * offloaded / PCIE_GB_PER_S * (1 - hidden_share(percent)) if percent > 0 else 0.0
    micro = (STEP_OVERHEAD_S + compute + transfer) * (LOW_VRAM_SLOWDOWN if low_vram else 1.0)
    step = micro * accum + ADAM_STEP_S[optimizer]
    return {"static_gb": static, "peak_gb": peak, "host_gb": host, "step_s": step}
