"""Reading pytorch/examples' ``| epoch N | b/ t batches | ... | ms/batch X | loss Y |`` lines.

``word_language_model/main.py`` (pytorch/examples @ 77f55b9, lines 198-206) prints, every
``--log-interval`` batches (default 200, line 40)::

    | epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 195.31 | loss  7.02 | ppl  1120.43

``ms/batch`` is ``elapsed * 1000 / args.log_interval`` (line 204), ``elapsed`` the wall time since the
previous line (``start_time`` reset at line 206) or since ``train()`` began (line 167): an AVERAGE over
``log_interval`` batches, not one batch's time, and the first line of each epoch covers batches
``0..log_interval`` (one more than it divides by, the first batch's warm-up included). ``loss`` is the
mean training loss over the same batches (line 199). Each batch there is one weight update (its
manual SGD, line 194, or ``--use-optimizer``'s AdamW step, line 191), so a line's ms/batch is a step
time. The lines within the first warm-up window of batches are left out, as for every printed
step time; the spread is that of the averages (narrower than the batches'). The end-of-epoch
``valid loss`` line is not training. Pure; never raises.
"""

from __future__ import annotations

import math
import re

from autotune.core.metrics import TrialMetrics
from autotune.trainers.kit.readers.guard import NUMBER as _NUM
from autotune.trainers.kit.readers.guard import never_raises, numbered_metrics
from autotune.trainers.kit.readers.guard import to_float as _float

_HEAD = re.compile(r"\|\s*epoch\s+(\d+)\s*\|\s*(\d+)\s*/\s*(\d+)\s+batches\s*\|", re.IGNORECASE)
_MS = re.compile(rf"\|\s*ms/batch\s+({_NUM})\s*(?:\||$)", re.IGNORECASE)
_LOSS = re.compile(rf"\|\s*loss\s+({_NUM})\s*(?:\||$)", re.IGNORECASE)


@never_raises
def read_ms_batch(text: str) -> TrialMetrics | None:
    """The steady step time (warm-up lines left out) and the interval losses; ``None`` without a line."""
    times: dict[int, float] = {}
    losses: dict[int, float] = {}
    for line in re.split(r"\r\n|\r|\n", text):
        head = _HEAD.search(line)
        if head is None:
            continue
        epoch, batch, total = (int(head.group(i)) for i in (1, 2, 3))
        at = (epoch - 1) * (total + 1) + batch  # batches since the run began (an epoch runs total+1 at most)
        rest = line[head.end() - 1 :]
        loss = _LOSS.search(rest)
        value = _float(loss.group(1)) if loss else None
        if value is not None:
            losses[at] = value
        ms = _MS.search(rest)
        seconds = _float(ms.group(1)) if ms else None
        if seconds is not None and math.isfinite(seconds) and seconds > 0:
            times[at] = seconds / 1000.0
    if not losses and not times:
        return None
    return numbered_metrics("ms-batch", losses, times)
