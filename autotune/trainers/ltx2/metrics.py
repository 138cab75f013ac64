"""An LTX-2 trial's readings: its ``Step`` lines and statistics block, the metrics file and the
hook, the validation step's timing left out (it timed the validation pass too)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from autotune.core.metrics import Readings, TrialMetrics
from autotune.core.verdict import combine
from autotune.trainers.kit.common import effective_batch_of, read_trial_record
from autotune.trainers.kit.output import read_output, trainer_reading
from autotune.trainers.kit.readers.hookfile import HOOK_FILE_NAME, read_hook_file
from autotune.trainers.kit.readers.ltx2log import parse_ltx2_output
from autotune.trainers.kit.readers.metricsfile import METRICS_FILE_NAME, read_metrics_file
from autotune.trainers.kit.readers.phases import without_step

#: The trainer's own readings (its log's, its metrics file's) put in the order to trust them.
TrainerOrder = Callable[[TrialMetrics, TrialMetrics], list[TrialMetrics]]


def read_ltx2_metrics(trial_dir: Path, output: str, trainer_order: TrainerOrder) -> TrialMetrics:
    """What the trial reported; empty when nothing could be read (a reader never takes the sweep down)."""
    try:
        trial_dir = Path(trial_dir)
        record = read_trial_record(trial_dir)
        validation_step = record.get("validation_step")
        validation_step = validation_step if isinstance(validation_step, int) else None
        parsed = parse_ltx2_output(read_output(trial_dir, output))
        if validation_step is not None:  # that step's line timed the validation pass too
            parsed.steps = [s for s in parsed.steps if s.step != validation_step]
        batch = effective_batch_of(record)
        own = trainer_reading(  # its Samples/second ignores GA: the batch over its step time instead
            *trainer_order(parsed.to_metrics(batch), read_metrics_file(trial_dir / METRICS_FILE_NAME)),
            own_rate=False,
        )
        hook = without_step(read_hook_file(trial_dir / HOOK_FILE_NAME), validation_step)
        return combine(Readings(hook=hook, trainer=own, effective_batch=batch))
    except Exception:  # the contract: a reader never takes the sweep down
        return TrialMetrics()
