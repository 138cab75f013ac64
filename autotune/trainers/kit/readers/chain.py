"""The readers of a trainer's printed output, in the order they are tried.

After the metrics file, the hook and LTX-2's ``Step`` lines (read by the adapter, which
knows the batch): Hugging Face ``Trainer``'s log dicts, ``iter N: loss X, time Yms``-style
lines, pytorch/examples' ``| ms/batch N |`` lines (``msbatch``), the training tqdm bar,
Lightning's ``Epoch N`` bar. Each reading that found
something is returned; ``merge_metrics`` takes each field from the first that has it, and a
non-finite loss from any of them.
"""

from __future__ import annotations

from autotune.core.metrics import TrialMetrics
from autotune.trainers.kit.readers.hftrainer import read_hf_trainer
from autotune.trainers.kit.readers.iterlog import read_iter_lines
from autotune.trainers.kit.readers.msbatch import read_ms_batch
from autotune.trainers.kit.readers.tqdmbar import read_lightning, read_tqdm


def printed_readings(text: str, batches_per_step: int = 1) -> list[TrialMetrics]:
    """What each printed-format reader found, in order; ``batches_per_step`` for Lightning's bar."""
    readings = [
        read_hf_trainer(text),
        read_iter_lines(text),
        read_ms_batch(text),
        read_tqdm(text),
        read_lightning(text, batches_per_step),
    ]
    return [r for r in readings if r is not None]
