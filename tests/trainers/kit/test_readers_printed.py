"""The printed-format readers (``autotune/trainers/kit/readers``: hftrainer, iterlog, tqdmbar, chain)
on real outputs in ``../shared/fixtures`` and on lines written from the trainers' own source."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from autotune.core.metrics import TrialMetrics
from autotune.core.outcome import Outcome, explain
from autotune.core.timing import warmup_count
from autotune.trainers.kit.common import merge_metrics
from autotune.trainers.kit.readers.chain import printed_readings
from autotune.trainers.kit.readers.hftrainer import read_hf_trainer
from autotune.trainers.kit.readers.hookfile import read_hook_file
from autotune.trainers.kit.readers.iterlog import read_iter_lines
from autotune.trainers.kit.readers.tqdmbar import parse_bars, read_lightning, read_tqdm, training_bar
from autotune.trainers.registry import get_adapter
from tests.helpers import need_shared, shared_path

HF = shared_path("hf-trainer-real")
SANA = shared_path("sana-diffusers-real")


def _need(folder: Path) -> None:
    need_shared(folder)


def _hf_output(run: str) -> str:
    _need(HF)
    return (HF / f"{run}.stdout").read_text() + "\n" + (HF / f"{run}.stderr").read_text()


def _ok(metrics: TrialMetrics, output: str = "") -> Outcome:
    return explain(
        0, None, timed_out=False, stalled=False, interrupted=False, output=output, metrics=metrics
    ).outcome


# --- Hugging Face Trainer, real output ---------------------------------------------------------


def test_hf_trainer_with_its_bar_reads_the_steady_step_time() -> None:
    # tqdm_ga2: 12 optimizer steps, logging every step; the final dict's 24.27 steps/s and
    # 388.4 samples/s include the first, slow steps (README), so the bar's steady rate is faster.
    metrics = read_hf_trainer(_hf_output("tqdm_ga2"))
    assert metrics is not None
    assert len(metrics.losses) == 12 and metrics.losses[0] == pytest.approx(4.797)
    assert metrics.steps_per_s == pytest.approx(24.27)
    assert metrics.step_time_s is not None and metrics.step_time_s < 1 / 24.27
    assert metrics.step_time_s == pytest.approx(1 / 25.62, rel=0.1)
    assert metrics.step_time_spread_s is not None
    assert metrics.samples_per_s is None  # left to batch / steady step time


def test_hf_trainer_without_a_bar_falls_back_to_the_final_dict() -> None:
    metrics = read_hf_trainer(_hf_output("no-tqdm_logging4"))
    assert metrics is not None
    assert metrics.losses == pytest.approx([4.796, 4.782, 4.787])
    assert metrics.step_time_s == pytest.approx(1 / 92.83)
    assert metrics.samples_per_s == pytest.approx(371.3)


@pytest.mark.parametrize(("run", "batch", "accumulation"), [("tqdm_ga2", 8, 2), ("no-tqdm_logging4", 4, 1)])
def test_command_adapter_reads_a_hf_trainer_run_as_ok(
    tmp_path: Path, run: str, batch: int, accumulation: int
) -> None:
    output = _hf_output(run)
    adapter = get_adapter(
        "command", template="python train.py --bs {batch_size} --steps {steps}", cwd=tmp_path
    )
    trial = tmp_path / "t"
    adapter.render(
        adapter.load_baseline(None),
        {"batch_size": batch},
        gradient_accumulation_steps=accumulation,
        steps=12,
        trial_dir=trial,
    )
    metrics = adapter.read_metrics(trial, output)
    assert metrics.measured and metrics.source.startswith("hf-trainer")
    assert _ok(metrics, output) is Outcome.OK
    if run == "tqdm_ga2":  # 16 samples per step at the steady rate beat the whole-run 388.4
        assert metrics.samples_per_s is not None and metrics.samples_per_s > 388.4


@pytest.mark.parametrize(
    "line",
    [
        "{'loss': 'nan', 'grad_norm': 'nan', 'learning_rate': '5e-05', 'epoch': '0.003906'}",  # 5.x
        "{'loss': nan, 'grad_norm': nan, 'learning_rate': 5e-05, 'epoch': 0.01}",  # 4.x
        "{'loss': 'inf', 'grad_norm': '0.1', 'learning_rate': '5e-05', 'epoch': '0.01'}",
    ],
)
def test_hf_trainer_nan_loss_when_printed(line: str) -> None:
    metrics = read_hf_trainer(
        "{'loss': '4.797', 'grad_norm': '0.6', 'learning_rate': '5e-05', 'epoch': '0.0'}\n" + line
    )
    assert metrics is not None and metrics.nan_loss
    assert _ok(metrics) is Outcome.NAN


# --- diffusers' Sana script, real output: the training bar only, never the close line ---------

SANA_RUNS = ["bs1_ok", "bs1_ga4", "bs8_six-images_partial-batch", "accelerate-launch"]


def _close_line_seconds(text: str) -> float:
    """The last rate printed on the ``Steps:`` bar (tqdm's close line: the whole-run average)."""
    bar = [seg for seg in text.replace("\r", "\n").split("\n") if seg.startswith("Steps:")][-1]
    rate = bar.split(",")[1].strip()
    return 1 / float(rate[:-4]) if rate.endswith("it/s") else float(rate[:-4])


@pytest.mark.parametrize("run", SANA_RUNS)
def test_sana_tqdm_reading_is_the_steady_rate_not_the_close_line(run: str) -> None:
    _need(SANA)
    text = (SANA / run / "stderr.log").read_text()
    assert training_bar(parse_bars(text)) is not None
    assert training_bar(parse_bars(text)).desc == "Steps"  # type: ignore[union-attr]
    metrics = read_tqdm(text)
    assert metrics is not None and metrics.step_time_s is not None
    assert metrics.step_time_spread_s is not None
    # The hook's per-step wall times in the same run are the truth to compare with: their median, the
    # typical step a smoothed bar rate estimates (the verdict itself takes the hook's mean).
    hook = read_hook_file(SANA / run / "hook.jsonl")
    assert hook.step_times_s
    truth = statistics.median(hook.step_times_s[warmup_count(len(hook.step_times_s)) :])
    close = _close_line_seconds(text)
    assert abs(metrics.step_time_s - truth) < abs(close - truth)
    assert metrics.step_time_s == pytest.approx(truth, rel=0.35)


def test_sana_bs1_ok_is_not_the_whole_run_average() -> None:
    _need(SANA)
    text = (SANA / "bs1_ok" / "stderr.log").read_text()
    metrics = read_tqdm(text)
    assert metrics is not None
    step_time, losses = metrics.step_time_s, metrics.losses
    assert step_time is not None and step_time < 0.3  # the close line says 1/2.59 = 0.386 s
    assert len(losses) == 30 and losses[-1] == pytest.approx(1.32)


def test_sana_crash_before_the_first_step_reads_nothing() -> None:
    _need(SANA)
    metrics = read_tqdm((SANA / "bs2_one-instance-prompt_crash" / "stderr.log").read_text())
    assert metrics is None or not metrics.measured


# --- nanoGPT-style lines --------------------------------------------------------------------
# karpathy/nanoGPT train.py line 327:
#   print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%")
# and line 265 (evaluation): print(f"step {iter_num}: train loss {...:.4f}, val loss {...:.4f}")


def _nanogpt(times_ms: list[float], loss: str = "3.2100", interval: int = 10) -> str:
    lines = ["step 0: train loss 4.2874, val loss 4.2823"]
    for i, ms in enumerate(times_ms):
        lines.append(f"iter {i * interval}: loss {loss}, time {ms:.2f}ms, mfu {-100 if i < 5 else 1.2:.2f}%")
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("text", "step_time", "losses"),
    [
        # iter 0 (compile, first batch) and iter 10 fall in the warm-up window
        (_nanogpt([9000.0, 900.0, 100.0, 102.0, 98.0, 100.0]), 0.1, 6),  # iter 0 replaces step 0
        (_nanogpt([100.0], loss="nan"), 0.1, 1),
        ("iter 3: loss 2.5000, time 55.00ms, mfu 3.10%", 0.055, 1),
        ("step 12/500 | loss=0.41 | time: 0.23s", 0.23, 1),
        ("Step 7 loss: 0.5 step_time 1.5s", 1.5, 1),
        ("step 3: train loss 4.1, val loss 4.2", None, 1),  # evaluation only: no time
        ("iteration 4: no loss here", "none", 0),
        ("iter 3: loss 2.50", None, 1),
        ("iter 3: loss 2.50, time 1", 1.0, 1),
    ],
)
def test_iter_lines(text: str, step_time: object, losses: int) -> None:
    metrics = read_iter_lines(text)
    if step_time == "none":
        assert metrics is None
        return
    assert metrics is not None
    assert metrics.step_time_s == (pytest.approx(step_time) if step_time is not None else None)
    assert len(metrics.losses) == losses


def test_iter_lines_skip_the_val_loss_and_catch_nan() -> None:
    metrics = read_iter_lines("step 0: train loss 4.2874, val loss nan")
    assert metrics is not None and metrics.losses == [4.2874]
    diverged = read_iter_lines(_nanogpt([100.0, 101.0], loss="nan"))
    assert diverged is not None and _ok(diverged) is Outcome.NAN


def test_nanogpt_run_through_the_command_adapter(tmp_path: Path) -> None:
    adapter = get_adapter("command", template="python train.py --max_iters={steps}", cwd=tmp_path)
    trial = tmp_path / "t"
    adapter.render(
        adapter.load_baseline(None),
        {"batch_size": 4},
        gradient_accumulation_steps=1,
        steps=31,
        trial_dir=trial,
    )
    text = _nanogpt([9000.0, 120.0, 100.0, 100.0])
    metrics = adapter.read_metrics(trial, text)
    assert metrics.step_time_s == pytest.approx(0.1)
    assert metrics.samples_per_s == pytest.approx(40.0)
    assert _ok(metrics, text) is Outcome.OK
    nan_text = _nanogpt([9000.0, 120.0, 100.0], loss="nan")
    assert _ok(adapter.read_metrics(trial, nan_text), nan_text) is Outcome.NAN


# --- Lightning's bar -------------------------------------------------------------------------
# Lightning-AI/pytorch-lightning src/lightning/pytorch/callbacks/progress/tqdm_progress.py:
# on_train_epoch_start does ``self.train_progress_bar.set_description(f"Epoch {trainer.current_epoch}")``,
# on_train_batch_end does ``_update_n(self.train_progress_bar, n)`` (``bar.n = value; bar.refresh()``,
# no ``update()``, so the rate shown is n / elapsed since the epoch began) and
# ``set_postfix(self.get_metrics(...))`` (``v_num=0, train_loss=...``).


def _lightning(per_batch: float, first: float, batches: int = 50, epochs: int = 2, nan_at: int = 0) -> str:
    lines = []
    for epoch in range(epochs):
        elapsed = 0.0
        for n in range(1, batches + 1):
            elapsed += first if n == 1 else per_batch
            loss = "nan" if nan_at and n >= nan_at else "0.512"
            pct = 100 * n // batches
            lines.append(
                f"Epoch {epoch}: {pct:3d}%|██| {n}/{batches} [00:{int(elapsed):02d}<00:05, "
                f"{n / elapsed:5.2f}it/s, v_num=0, train_loss={loss}]"
            )
        lines.append(f"Validation DataLoader 0: 100%|██| 10/10 [00:00<00:00, {50.0:5.2f}it/s]")
    return "\r".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "accumulation", "step_time"),
    [
        # the mean of the steady batches: the second epoch's first (1.0 s) is time the run spends,
        # (79 x 0.2 + 1.0) / 80 past the warm-up
        (_lightning(0.2, 1.0), 1, 0.21),
        (_lightning(0.2, 1.0), 4, 0.84),  # the bar counts batches, not optimizer steps
        (_lightning(0.05, 3.0, batches=40, epochs=1), 1, 0.05),
        ("Epoch 0: 100%|██████████| 50/50 [00:10<00:00, 4.80it/s, v_num=0, train_loss=0.3]", 1, 1 / 4.8),
    ],
)
def test_lightning_bar(text: str, accumulation: int, step_time: float) -> None:
    metrics = read_lightning(text, accumulation)
    assert metrics is not None and metrics.source == "lightning"
    assert metrics.step_time_s == pytest.approx(step_time, rel=0.05)
    assert read_tqdm(text) is None  # the generic reader leaves Lightning's bar alone
    assert metrics.losses and math.isfinite(metrics.losses[-1])


def test_lightning_nan_loss() -> None:
    metrics = read_lightning(_lightning(0.2, 1.0, nan_at=30))
    assert metrics is not None and _ok(metrics) is Outcome.NAN


# --- tqdm bars in general ---------------------------------------------------------------------


def test_tqdm_ignores_loading_bars_and_the_close_line() -> None:
    lines = [
        "Loading checkpoint shards: 100%|██████████| 3/3 [00:00<00:00, 9000.00it/s]",
        *(f"Steps:  {n}%|█| {n}/30 [00:{n:02d}<00:10,  2.00it/s, loss=0.5, lr=0.0001]" for n in range(1, 31)),
        "Loading pipeline components...: 100%|██████████| 5/5 [00:00<00:00, 83.47it/s]",
        "Steps: 100%|██████████| 30/30 [01:30<00:00,  0.33it/s, loss=0.5, lr=0.0001]",
    ]
    metrics = read_tqdm("\r".join(lines))
    assert metrics is not None and metrics.step_time_s == pytest.approx(0.5)
    assert metrics.step_time_spread_s == 0


def test_a_nan_from_a_later_reader_wins_the_merge() -> None:
    finite = TrialMetrics(step_time_s=0.1, losses=[1.0, 0.9], source="hook")
    readings = printed_readings("Steps:  10%|█| 1/10 [00:01<00:09,  1.00it/s, loss=nan]")
    merged = merge_metrics(finite, *readings)
    assert merged.nan_loss and merged.step_time_s == 0.1
    assert _ok(merged) is Outcome.NAN


GARBAGE = [
    "",
    "\x00\xff garbage",
    "{'loss': ",
    "{'loss': 'x', 'epoch': }",
    "{'train_runtime': 'nan', 'train_steps_per_second': '0', 'train_samples_per_second': '-1'}",
    "iter 99999999999999999999999: loss 1e999999, time 1e99999ms",
    "Steps:  40%|████      | 4/10 [00:02<",
    "Steps:  40%|████      | 4/10 [00:02<00:03,  0.00it/s]",
    "Epoch 0:  40%|████      | 0/10 [00:00<?, ?it/s, v_num=0]",
    "step " * 10000,
    "|" * 5000 + "1/2 [",
    "1%||1/1 [0<0, 1it/s, " * 5000,
    "iter 1: loss 1, time " * 5000,
    "{'loss': 1, " * 5000,
    "Epoch 0: " * 5000 + "5%|",
]


@pytest.mark.parametrize("text", GARBAGE)
def test_readers_never_raise_on_garbage(text: str) -> None:
    for reading in printed_readings(text, 2):
        assert isinstance(reading, TrialMetrics)
    for reader in (read_hf_trainer, read_iter_lines, read_tqdm, read_lightning):
        reader(text)


def test_readers_never_raise_on_truncated_real_output() -> None:
    _need(SANA)
    text = (SANA / "bs1_ok" / "stderr.log").read_text()
    for cut in range(0, len(text), 97):
        for reading in printed_readings(text[:cut]):
            assert isinstance(reading, TrialMetrics)


def test_an_unlabelled_inference_bar_is_not_the_training_bar() -> None:
    # diffusers' pipelines show an unlabelled bar per validation run; HF's evaluation bar is
    # unlabelled too but counts the evaluation batches (another total).
    steps = [f"Steps:  {n}%|█| {n}/10 [00:{n:02d}<00:10,  2.00it/s, loss=0.5]" for n in range(1, 11)]
    inference = [f" {n}%|█| {n}/20 [00:00<00:00, 40.00it/s]" for n in range(1, 21)] * 3
    metrics = read_tqdm("\r".join(steps[:5] + inference + steps[5:]))
    assert metrics is not None and metrics.step_time_s == pytest.approx(0.5)
    hf = [f" {n}%|█| {n}/12 [00:00<00:00, 25.00it/s]" for n in range(1, 13)]
    evaluation = [f" {n}%|█| {n}/50 [00:00<00:00, 400.00it/s]" for n in range(1, 51)]
    metrics = read_tqdm("\r".join(hf[:6] + evaluation + hf[6:]))
    assert metrics is not None and metrics.step_time_s == pytest.approx(0.04)


# --- the real batch: diffusers' "Running training" block, partial batches counted as partial ------


@pytest.mark.parametrize(
    ("run", "asked", "real"),
    [
        ("bs1_ok", 1, 1.0),
        ("bs1_ga4", 4, 4.0),  # batch 1 x accumulation 4, 6 batches of 1 per epoch
        ("bs8_six-images_partial-batch", 8, 6.0),  # one batch of 6 per epoch: every step trains 6
        ("accelerate-launch", 1, 1.0),
    ],
)
def test_sana_real_runs_credit_the_samples_really_stepped(
    run: str, asked: int, real: float, tmp_path: Path
) -> None:
    _need(SANA)
    import json
    import shutil

    trial = tmp_path / run
    trial.mkdir()
    shutil.copy(SANA / run / "hook.jsonl", trial / "hook.jsonl")  # this fixture's hook counted no samples
    (trial / "adapter.json").write_text(
        json.dumps({"effective_batch": asked, "gradient_accumulation_steps": 1})
    )
    metrics = get_adapter("sana").read_metrics(trial, (SANA / run / "stderr.log").read_text())
    assert metrics.step_time_s is not None and metrics.samples_per_s is not None
    assert metrics.samples_per_s == pytest.approx(real / metrics.step_time_s)


@pytest.mark.parametrize(
    ("text", "asked", "real"),
    [
        ("", 8, 8),  # nothing printed: the batch we asked for
        ("***** Running training *****\n  Num examples = 6\n", 8, 8),  # an incomplete block: ours
        (
            "***** Running training *****\n  Num examples = 10\n  Num batches each epoch = 3\n"
            "  Total train batch size (w. parallel, distributed & accumulation) = 8\n"
            "  Gradient Accumulation steps = 2\n",
            8,
            2 * 10 / 3,  # batches of 4, 4, 2: an optimizer step of two trains 6.67 on average
        ),
        (
            "***** Running training *****\n  Num examples = 100\n  Num batches each epoch = 1\n"
            "  Total train batch size (w. parallel, distributed & accumulation) = 4\n"
            "  Gradient Accumulation steps = 1\n",
            4,
            4,  # never more than the total batch
        ),
    ],
)
def test_real_batch_from_the_running_training_block(text: str, asked: int, real: float) -> None:
    from autotune.trainers.kit.readers.runblock import real_batch

    assert real_batch(text, asked) == pytest.approx(real)
