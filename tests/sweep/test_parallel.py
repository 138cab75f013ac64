"""Picking the cards for --parallel, and one terminal shared by several workers."""

from __future__ import annotations

import io
import threading

import pytest

from autotune.errors import UsageError
from autotune.gpu.nvml import GIB
from autotune.gpu.probe import VisibleGpu
from autotune.sweep.parallel import LinePrefixer, cards_for_parallel


def gpu(i: int, name: str = "NVIDIA H100 80GB HBM3", gib: float = 79.6) -> VisibleGpu:
    return VisibleGpu(
        cuda_index=i, nvml_index=i, uuid=f"GPU-{i}aaa", name=name, memory_total_bytes=int(gib * GIB)
    )


@pytest.mark.parametrize(
    ("gpus", "chosen"),
    [
        ([gpu(0)], [0]),
        ([gpu(0), gpu(1), gpu(2), gpu(3)], [0, 1, 2, 3]),
        ([gpu(2), gpu(0)], [2, 0]),  # CUDA_VISIBLE_DEVICES order is kept
    ],
)
def test_one_model_uses_every_card(gpus: list[VisibleGpu], chosen: list[int]) -> None:
    assert [g.nvml_index for g in cards_for_parallel(gpus)] == chosen


@pytest.mark.parametrize(
    ("gpus", "must_say"),
    [
        ([], ["no GPU is visible", "without --parallel"]),
        (
            [gpu(0), gpu(1, "NVIDIA RTX A6000", 47.99), gpu(2)],
            [
                "mixes 2 GPU models",
                "only comparable on identical cards",
                "CUDA_VISIBLE_DEVICES=GPU-0aaa,GPU-2aaa",
                "NVIDIA RTX A6000 (48.0 GiB): CUDA_VISIBLE_DEVICES=GPU-1aaa",
                "--study",
            ],
        ),
        (  # same name, different memory: not the same card for memory results
            [gpu(0, "NVIDIA A100-SXM4", 39.4), gpu(1, "NVIDIA A100-SXM4", 79.2)],
            ["mixes 2 GPU models", "39.4 GiB", "79.2 GiB"],
        ),
    ],
)
def test_no_card_or_mixed_models_are_refused_with_the_way_out(
    gpus: list[VisibleGpu], must_say: list[str]
) -> None:
    with pytest.raises(UsageError) as err:
        cards_for_parallel(gpus)
    for text in must_say:
        assert text in str(err.value)


def test_line_prefixer_writes_whole_prefixed_lines_from_many_threads() -> None:
    out = io.StringIO()
    lock = threading.Lock()
    streams = [LinePrefixer(out, f"[gpu {i}] ", lock) for i in range(4)]

    def talk(i: int) -> None:
        for n in range(200):
            streams[i].write(f"line {n} ")
            streams[i].write(f"of {i}\n")

    threads = [threading.Thread(target=talk, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = out.getvalue().splitlines()
    assert len(lines) == 800
    for line in lines:
        prefix, rest = line.split("] ", 1)
        i = int(prefix.removeprefix("[gpu "))
        assert rest.startswith("line ") and rest.endswith(f"of {i}")


def test_line_prefixer_turns_redraws_into_lines_and_flushes_the_rest() -> None:
    out = io.StringIO()
    s = LinePrefixer(out, "> ", threading.Lock())
    s.write("trial 1 running 3s\rtrial 1 running 4s\r")
    s.write("done")
    assert out.getvalue() == "> trial 1 running 3s\n> trial 1 running 4s\n"
    s.flush()
    assert out.getvalue().endswith("> done\n")
    assert s.isatty() is False
