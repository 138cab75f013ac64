"""The reader of pytorch/examples' ``| ms/batch N |`` lines (``readers/msbatch``), on lines in the format
``word_language_model/main.py`` prints (pytorch/examples @ 77f55b9, lines 201-204:
``'| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | loss {:5.2f} | ppl {:8.2f}'``)."""

from __future__ import annotations

import math

import pytest

from autotune.core.metrics import Readings, TrialMetrics
from autotune.core.verdict import combine
from autotune.trainers.kit.readers.chain import printed_readings
from autotune.trainers.kit.readers.msbatch import read_ms_batch


def _line(epoch: int, batch: int, total: int, ms: float, loss: float, lr: float = 20.0) -> str:
    ppl = math.exp(loss) if loss < 700 else float("inf")
    return (
        f"| epoch {epoch:3d} | {batch:5d}/{total:5d} batches | lr {lr:02.2f} | ms/batch {ms:5.2f} | "
        f"loss {loss:5.2f} | ppl {ppl:8.2f}"
    )


REAL = "| epoch   1 |   200/  218 batches | lr 20.00 | ms/batch 195.31 | loss  7.02 | ppl  1120.43"
END = "| end of epoch   1 | time: 45.02s | valid loss  6.10 | valid ppl   445.86"


@pytest.mark.parametrize(
    ("text", "step_time", "losses", "n_times"),
    [
        pytest.param(REAL, 0.19531, [7.02], 1, id="the-real-line"),
        pytest.param(
            "\n".join([_line(1, 200, 2983, 300.0, 7.5), _line(1, 400, 2983, 200.0, 7.0)]),
            0.2,
            [7.5, 7.0],
            2,
            id="first-interval-is-warm-up",  # it holds batch 0 too (main.py:167)
        ),
        pytest.param(
            "\n".join([_line(1, b, 90, 9.0 if b <= 20 else 2.0, 5.0) for b in range(5, 90, 5)]),
            0.002,
            [5.0] * 17,
            17,
            id="lines-in-the-first-20-batches-left-out",
        ),
        pytest.param(
            "\n".join(
                [
                    *(_line(1, 10, 20, 8.0, 6.0), _line(1, 20, 20, 4.0, 5.0), END),
                    *(_line(2, 10, 20, 4.0, 4.5), _line(2, 20, 20, 4.0, 4.0), END),
                ]
            ),
            0.004,
            [6.0, 5.0, 4.5, 4.0],
            4,
            id="epochs-follow-on-and-valid-loss-is-not-training",
        ),
        pytest.param(
            "Using device: cpu\r\n" + _line(1, 5, 40, 1.5, 3.0) + "\r\n" + _line(1, 10, 40, 1.5, 2.0),
            0.0015,
            [3.0, 2.0],
            2,
            id="crlf",
        ),
        pytest.param(END + "\ndone", None, None, 0, id="no-training-line"),
        pytest.param("| epoch   1 |   200/  218 batches | lr 20.00 | ms/b", None, None, 0, id="torn"),
    ],
)
def test_read_ms_batch(text: str, step_time: float | None, losses: list[float] | None, n_times: int) -> None:
    metrics = read_ms_batch(text)
    if losses is None:
        assert metrics is None
        return
    assert metrics is not None and metrics.source == "ms-batch"
    assert metrics.losses == pytest.approx(losses)
    assert len(metrics.step_times_s) == n_times
    assert metrics.step_time_s == pytest.approx(step_time)


def test_a_diverged_loss_reads_as_nan() -> None:
    # '{:5.2f}'.format(nan) is '  nan': the trial is nan, whatever the hook saw.
    text = "\n".join([_line(1, 5, 40, 2.0, 3.0), _line(1, 10, 40, 2.0, float("nan"))])
    metrics = read_ms_batch(text)
    assert metrics is not None and metrics.nan_loss


def test_the_chain_reads_it_and_the_hook_decides_with_the_trainers_figure_beside() -> None:
    text = "\n".join(_line(1, b, 200, 5.0, 4.0) for b in range(10, 200, 10))
    (own,) = printed_readings(text)
    hook = TrialMetrics(step_time_s=0.004, steady_steps=50, source="hook")
    merged = combine(Readings(hook=hook, trainer=own, effective_batch=20, loader_count_right=True))
    assert merged.timed_by == "hook"
    assert merged.samples_per_s == pytest.approx(20 / 0.004)  # the template's batch per backward
    assert merged.trainer_step_time_s == pytest.approx(0.005)
    assert merged.trainer_samples_per_s == pytest.approx(20 / 0.005)
