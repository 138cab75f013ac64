"""The built-in reference trainer: a small, real video-diffusion LoRA trainer speaking LTX-2's config.

Run as ``python -m trials.reference CONFIG.yaml [--disable-progress-bars]``. It honours the same
memory knobs as the LTX-2 trainer (int8-quanto, adamw8bit, gradient checkpointing, batch size,
gradient accumulation, bf16 on CUDA), prints the same log lines and statistics block, and on CPU
emulates a card of ``reference.emulated_vram_gb`` with exact tensor-memory accounting.
"""
