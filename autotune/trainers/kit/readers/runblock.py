"""The ``***** Running training *****`` block that diffusers' (and accelerate-style) scripts print.

diffusers' ``examples/dreambooth/train_dreambooth_lora_sana.py`` (at 58eb52c, lines 1315-1322)
logs, after ``accelerator.prepare`` (line 1295) has sharded the data loader::

    ***** Running training *****
      Num examples = {len(train_dataset)}                      (the whole dataset)
      Num batches each epoch = {len(train_dataloader)}         (per process, partial batch included)
      Instantaneous batch size per device = {train_batch_size}
      Total train batch size (w. parallel, distributed & accumulation) = {total_batch_size}
      Gradient Accumulation steps = {gradient_accumulation_steps}

Why it matters: the data loader yields partial batches, so ``batch x accumulation x GPUs`` is only
the samples an optimizer step asked for. Six images at batch 8 give one batch of 6 per epoch: every
step trains 6 samples, not 8 (``../shared/fixtures/sana-diffusers-real/bs8_six-images_partial-batch``).
Over an epoch each process sees ``examples / processes`` samples in ``batches`` batches, so all the
processes together train ``accumulation x examples / batches`` samples per optimizer step on average,
never more than the total batch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.trainers.kit.readers.guard import never_raises

_FIELDS = {
    "examples": re.compile(r"Num examples = (\d+)"),
    "batches": re.compile(r"Num batches each epoch = (\d+)"),
    "total": re.compile(r"Total train batch size \(w\. parallel, distributed & accumulation\) = (\d+)"),
    "accumulation": re.compile(r"Gradient Accumulation steps = (\d+)"),
}


@dataclass(frozen=True)
class RunBlock:
    examples: int
    batches: int
    total: int
    accumulation: int

    @property
    def samples_per_step(self) -> float:
        """The samples one optimizer step really trained, on average over an epoch (all processes)."""
        return min(float(self.total), self.accumulation * self.examples / self.batches)


@never_raises
def read_run_block(text: str) -> RunBlock | None:
    """The last complete block printed (a restarted script prints a new one), or ``None``."""
    start = text.rfind("***** Running training *****")
    if start < 0:
        return None
    found: dict[str, int] = {}
    for name, pattern in _FIELDS.items():
        match = pattern.search(text, start)
        if match is None:
            return None
        found[name] = int(match.group(1))
    if min(found.values()) < 1:
        return None
    return RunBlock(**found)


def real_batch(text: str, asked: int | None) -> float | None:
    """Samples per optimizer step: the block's figure when printed, else ``asked`` (our own count of
    batch x accumulation x GPUs)."""
    block = read_run_block(text)
    return block.samples_per_step if block is not None else asked
