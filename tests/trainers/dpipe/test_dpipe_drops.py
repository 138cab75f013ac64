"""What diffusion-pipe drops of a dataset at a global batch (``dpipe.buckets``), the file headers it
is read from (``dpipe.media``), and how a trial and the full run's warnings follow it.

The expected values are the real trainer's rules worked by hand, from utils/dataset.py @ 8f83dbf:
``_find_closest_ar_bucket`` (838-852), ``_find_closest_size_bucket`` (854-872),
``ConcatenatedBatchedDataset._make_divisible_by`` (392-396) and its global batch (363-378, 956-957).
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

from autotune.config.tomledit import load_toml_data
from autotune.trainers.dpipe.buckets import (
    Batch,
    Clip,
    Layout,
    drops_at,
    frame_bucket,
    largest,
    largest_kept,
    layout_of,
    scope_of,
    size_bucket_of,
)
from autotune.trainers.dpipe.fullrun import full_run_warnings, read_data
from autotune.trainers.dpipe.media import read_clip, read_folder
from tests.helpers import FAKES
from tests.trainers.dpipe.test_trainer_dpipe import _run, _setup

# --- the frame bucket a clip trains in ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("frames", "buckets", "expected"),
    [
        (1, [1, 33], 1),  # an image: the frame-1 bucket
        (33, [1, 33], 33),
        (40, [1, 33], 33),  # longer than the longest: the longest (the smallest frames - bucket >= 0)
        (20, [1, 33], None),  # a video reaching only the frame-1 bucket: skipped as too short (848-850)
        (20, [1, 17, 33], 17),  # shorter than the longest: NOT dropped, trains in the shorter bucket
        (16, [1, 17, 33], None),  # shorter than the shortest video bucket: dropped
        (0, [1, 33], None),  # no bucket reached at all (844-846)
    ],
)
def test_frame_bucket(frames: int, buckets: list[int], expected: int | None) -> None:
    assert frame_bucket(frames, buckets) == expected


SIZES = [(512, 512, 1), (512, 512, 33), (768, 432, 33)]


@pytest.mark.parametrize(
    ("clip", "expected"),
    [
        (Clip(1920, 1080, 40), (1.778, 576.0, 33)),  # 16:9 video: its own AR; the side is sqrt(768 * 432)
        (Clip(1000, 1000, 40), (1.0, 512.0, 33)),
        # a 16:9 image: the candidates are the frame-sorted buckets at the argsort of its distance to the
        # 2 distinct ARs [1.0, 1.778]: buckets #1 (768x432x33) and #0 (512x512x33), both out of its reach;
        # the square frame-1 bucket is never tried, so it is skipped (856-870)
        (Clip(1920, 1080, 1), None),
        (Clip(1920, 1080, 20), None),  # a video never goes to a frame-1 bucket (862-864)
    ],
)
def test_size_bucket(clip: Clip, expected: tuple[float, float, int] | None) -> None:
    assert size_bucket_of(clip, SIZES) == expected


#: examples/cosmos_dataset.toml's size buckets.
COSMOS = [(960, 960, 1), (960, 704, 1), (704, 960, 1), (1280, 704, 1), (704, 1280, 1)]


def test_size_buckets_are_taken_in_the_order_the_real_code_indexes() -> None:
    """The argsort over the sorted ARs indexes the frame-sorted bucket list (856-857): a 16:9 image's
    nearest AR is 1280x704's 1.818, at index 4 of the sorted ARs, and index 4 of the list is 704x1280."""
    assert size_bucket_of(Clip(1920, 1080, 1), COSMOS) == (0.55, 949.273, 1)


def test_clips_go_to_the_nearest_ar_and_every_resolution() -> None:
    top = {
        "resolutions": [256, 512],
        "enable_ar_bucket": True,
        "min_ar": 0.5,
        "max_ar": 2.0,
        "num_ar_buckets": 3,
    }
    scope = scope_of({"frame_buckets": [1, 33]}, top, [Clip(1280, 720, 33), Clip(500, 1000, 1)])
    assert scope.ars == (0.5, 1.0, 2.0)  # geomspace(0.5, 2, 3)
    assert dict(layout_of([scope]).samples) == {
        (2.0, 256.0, 33): 1,  # log(16/9) is nearer log 2 than log 1
        (2.0, 512.0, 33): 1,
        (0.5, 256.0, 1): 1,
        (0.5, 512.0, 1): 1,
    }


# --- what a global batch drops ---------------------------------------------------------------------


def _layout(samples: dict[tuple[float, float, int], int]) -> Layout:
    layout = Layout()
    layout.samples.update(samples)
    return layout


BIG, SMALL, IMG = (1.0, 512.0, 33), (1.0, 256.0, 33), (1.0, 512.0, 1)


@pytest.mark.parametrize(
    ("samples", "batch", "whole", "remainder", "kept", "peak"),
    [
        ({BIG: 5, SMALL: 3}, Batch(4, 4), {SMALL: 3}, 1, 4, BIG),  # 5 -> 4; 3 < 4: dropped whole
        ({BIG: 3, SMALL: 9}, Batch(4, 4), {BIG: 3}, 1, 8, SMALL),  # the peak bucket dropped: SMALL peaks
        ({BIG: 3, SMALL: 9}, Batch(3, 3), {}, 0, 12, BIG),
        ({BIG: 2, IMG: 6}, Batch(2, 8), {IMG: 6}, 0, 2, BIG),  # images take the image micro batch
        ({BIG: 1}, Batch(2, 2), {BIG: 1}, 0, 0, None),  # nothing left: 'Processed dataset was empty'
    ],
)
def test_drops_at_a_global_batch(
    samples: dict[tuple[float, float, int], int],
    batch: Batch,
    whole: dict[tuple[float, float, int], int],
    remainder: int,
    kept: int,
    peak: tuple[float, float, int] | None,
) -> None:
    layout = _layout(samples)
    drops = drops_at(layout, batch)
    assert (dict(drops.whole), drops.remainder, drops.kept) == (whole, remainder, kept)
    assert drops.total == sum(samples.values())
    assert largest_kept(layout, batch) == peak
    assert largest(layout) == max(samples, key=lambda k: k[1] * k[1] * k[2])


def test_num_repeats_multiply_per_directory_then_concatenate() -> None:
    top = {"resolutions": [512], "frame_buckets": [1, 33]}
    one = scope_of({"num_repeats": 1.5}, top, [Clip(64, 64, 33)] * 3)  # int(3 * 1.5) = 4 (line 337)
    two = scope_of({"num_repeats": 2}, top, [Clip(64, 64, 40)])
    assert layout_of([one, two]).samples[(1.0, 512.0, 33)] == 6  # same size bucket: concatenated


# --- the file headers -----------------------------------------------------------------------------


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def mp4(width: int, height: int, frames: int, fps: int) -> bytes:
    """An MP4 whose moov (after the media data, as many encoders write it) holds one video track."""
    timescale = fps * 100
    mdhd = _box(b"mdhd", bytes(4) + struct.pack(">IIII", 0, 0, timescale, frames * 100) + bytes(4))
    hdlr = _box(b"hdlr", bytes(8) + b"vide" + bytes(12))
    entry = _box(b"avc1", bytes(24) + struct.pack(">HH", width, height) + bytes(50))
    stsd = _box(b"stsd", bytes(4) + struct.pack(">I", 1) + entry)
    stsz = _box(b"stsz", bytes(4) + struct.pack(">II", 0, frames))
    stbl = _box(b"minf", _box(b"stbl", stsd + stsz))
    moov = _box(b"moov", _box(b"trak", _box(b"mdia", mdhd + hdlr + stbl)))
    return _box(b"ftyp", b"isom" + bytes(4)) + _box(b"mdat", bytes(64)) + moov


def png(width: int, height: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", width, height) + b"\x08\x02\0\0\0"


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + bytes(14)
    return b"\xff\xd8" + app0 + b"\xff\xc0" + struct.pack(">HBHH", 17, 8, height, width) + bytes(12)


def test_headers_give_the_size_and_the_frames_at_the_models_rate(tmp_path: Path) -> None:
    files = {
        "a.mp4": mp4(1280, 720, 100, 30),
        "b.png": png(640, 480),
        "c.jpg": jpeg(400, 300),
        "d.gif": b"GIF89a",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert read_clip(tmp_path / "a.mp4", 24) == Clip(1280, 720, 80)  # int(100 * 24 / 30), dataset.py:796
    assert read_clip(tmp_path / "a.mp4", None) == Clip(1280, 720, 100)
    assert read_clip(tmp_path / "b.png", 24) == Clip(640, 480, 1)
    assert read_clip(tmp_path / "c.jpg", 24) == Clip(400, 300, 1)
    assert read_clip(tmp_path / "d.gif", 24) is None
    (tmp_path / "frag.mp4").write_bytes(mp4(640, 360, 0, 24))  # fragmented: no samples in the moov
    assert read_clip(tmp_path / "frag.mp4", 24) is None
    (tmp_path / "frag.mp4").unlink()
    for name in ("a", "b", "d"):
        (tmp_path / f"{name}.txt").write_text("a caption")
    folder = read_folder(tmp_path, 24)  # the .txt captions are no samples (dataset.py:650)
    assert (len(folder.clips), folder.unread, folder.no_caption) == (2, 1, 1)  # c.jpg has no caption


# --- the trial's view and the full run's warnings -----------------------------------------------------

#: One 512-area 33-frame bucket at AR 1 (no AR buckets), HunyuanVideo-like clips of 40 frames at 24 fps.
DATASET = """\
resolutions = [512]
frame_buckets = [1, 33]

[[directory]]
path = '{tmp}/clips'
num_repeats = 1
"""


def _clips(folder: Path, videos: int, short: int, images: int) -> None:
    for i in range(videos):
        (folder / f"v{i}.mp4").write_bytes(mp4(512, 512, 40, 16))  # Wan resamples to 16 fps: 40 frames
        (folder / f"v{i}.txt").write_text("a clip")
    for i in range(short):
        (folder / f"s{i}.mp4").write_bytes(mp4(512, 512, 20, 16))  # shorter than the 33-frame bucket
        (folder / f"s{i}.txt").write_text("a short clip")
    for i in range(images):
        (folder / f"i{i}.png").write_bytes(png(512, 512))
        (folder / f"i{i}.txt").write_text("an image")


def test_a_trial_repeats_its_clips_and_the_full_run_is_warned(tmp_path: Path) -> None:
    adapter, baseline = _setup(tmp_path, dataset=DATASET)
    _clips(tmp_path / "clips", videos=3, short=2, images=8)
    trial = tmp_path / "trial-0001"
    adapter.render(baseline, {"batch_size": 2}, gradient_accumulation_steps=2, steps=5, trial_dir=trial)
    # global batch 4 > the 3 clips of the 33-frame bucket: the real trainer would drop it whole and
    # the trial would train images only. Its copy repeats each clip 4 times, so the bucket stays.
    dataset = load_toml_data((trial / "dataset.toml").read_text(), "ds")
    assert dataset["directory"][0]["num_repeats"] == 4
    assert dataset["frame_buckets"] == [33]
    record = json.loads((trial / "adapter.json").read_text())
    assert record["data_bucket"] == "512x512 px area, 33 frames"
    assert "clips repeated x4" in record["data_note"]
    assert "the full run at this batch drops this bucket (3 samples at most)" in record["data_note"]
    assert "1 frame" in record["data_note"]  # it peaks on the images

    lines = adapter.data_warnings(baseline, batch_size=2, gradient_accumulation_steps=2, data_parallel=1)
    text = "\n".join(lines)
    assert "drops 1 bucket(s) whole (3 samples" in text
    assert "at global batch 4 (micro batch 2 x 2 accumulation x 1 data-parallel GPU)" in text
    assert "trains 8 of 11 samples" in text
    assert "2 video(s) are shorter than the shortest video frame bucket" in text
    assert "image(s) fit none" not in text
    assert "The largest bucket (512x512 px area, 33 frames, at most 3 samples in one AR bucket)" in text
    # at global batch 3 the 33-frame bucket survives: only the short clips are left to say
    fine = adapter.data_warnings(baseline, batch_size=1, gradient_accumulation_steps=3, data_parallel=1)
    assert [line for line in fine if "largest bucket" in line] == []
    assert any("2 video(s) are shorter" in line for line in fine)
    # past every bucket's count: nothing left, and the trainer says so only by dying
    none = adapter.data_warnings(baseline, batch_size=16, gradient_accumulation_steps=1, data_parallel=1)
    assert any(
        "the full run trains nothing: the trainer stops with 'Processed dataset was empty'" in x for x in none
    )
    # the plan, before a batch is picked: past which micro batch the sweep's trials leave the full run
    limit = "Micro batches above 1 (a global batch above 3 at 2 accumulation"
    for top, said in ((8, True), (1, False)):
        lines = adapter.data_warnings(
            baseline, batch_size=1, gradient_accumulation_steps=2, data_parallel=1, max_batch_size=top
        )
        assert any(line.startswith(limit) for line in lines) is said, lines
    # an unreadable folder: no warning invented
    assert full_run_warnings(read_data({"directory": []}, {}, tmp_path), Batch(4, 4), "x") == []


def test_a_trial_trains_the_longest_frame_bucket_its_clips_reach(tmp_path: Path) -> None:
    """Clips of 20 frames with frame_buckets [1, 17, 33]: the full run trains them at 17 frames
    (dataset.py:842-847); a trial cut to [33] alone would drop them all (848-850) and train images."""
    adapter, baseline = _setup(tmp_path, dataset=DATASET.replace("[1, 33]", "[1, 17, 33]"))
    _clips(tmp_path / "clips", videos=0, short=4, images=2)
    trial = tmp_path / "trial-0001"
    adapter.render(baseline, {"batch_size": 1}, gradient_accumulation_steps=1, steps=5, trial_dir=trial)
    dataset = load_toml_data((trial / "dataset.toml").read_text(), "ds")
    assert dataset["directory"][0]["frame_buckets"] == [17]
    assert json.loads((trial / "adapter.json").read_text())["data_bucket"] == "512x512 px area, 17 frames"
    lines = adapter.data_warnings(baseline, batch_size=1, gradient_accumulation_steps=1, data_parallel=1)
    assert any(
        "no clip reaches the 33-frame bucket: the full run trains 17 frame(s) at most" in x for x in lines
    )
    # an unreadable clip might reach 33 frames: the trial keeps the config's longest, nothing is claimed
    (tmp_path / "clips" / "odd.mkv").write_bytes(b"\x1a\x45\xdf\xa3")
    (tmp_path / "clips" / "odd.txt").write_text("a clip of unknown length")
    adapter.render(baseline, {"batch_size": 1}, gradient_accumulation_steps=1, steps=5, trial_dir=trial)
    assert load_toml_data((trial / "dataset.toml").read_text(), "ds")["frame_buckets"] == [33]
    assert "frame_buckets" not in load_toml_data((trial / "dataset.toml").read_text(), "ds")["directory"][0]
    lines = adapter.data_warnings(baseline, batch_size=1, gradient_accumulation_steps=1, data_parallel=1)
    assert not any("no clip reaches" in x for x in lines)
    assert any("leave out 1 file(s) whose headers are not PNG, JPEG or MP4/MOV" in x for x in lines)


@pytest.mark.process
def test_the_fake_trainer_drops_what_the_real_one_drops(tmp_path: Path) -> None:
    """Through the fake: a folder of 3 captioned images at global batch 4 is empty to the trainer
    (dataset.py:392-396, 1304-1309); the trial's repeated copy trains."""
    adapter, baseline = _setup(tmp_path, dataset=DATASET)
    _clips(tmp_path / "clips", videos=0, short=0, images=3)
    trial = tmp_path / "t"
    spec = adapter.render(
        baseline, {"batch_size": 4}, gradient_accumulation_steps=1, steps=2, trial_dir=trial
    )
    done = _run(spec)
    assert done.returncode == 0, done.stderr
    # the same config with the user's own num_repeats: the real rule kills it
    text = (trial / "dataset.toml").read_text().replace("num_repeats = 4", "num_repeats = 1")
    (trial / "dataset.toml").write_text(text)
    died = _run(spec)
    assert died.returncode == 1 and "Processed dataset was empty" in died.stderr
    assert "is being completely dropped because it doesn't have enough images" in died.stdout


@pytest.mark.process
@pytest.mark.timeout(300)
def test_plan_and_report_warn_what_the_full_run_drops(tmp_path: Path) -> None:
    """``autotune plan`` names the drops at the batches it would try; the sweep's report at the
    winner's (here the baseline's micro batch 4: 3 clips of 33 frames, fewer than the batch)."""
    from tests.helpers import run_cli
    from tests.trainers.dpipe.test_trainer_dpipe import MAIN, write_dpipe_setup

    config = write_dpipe_setup(
        tmp_path,
        dataset=DATASET,
        main=MAIN.replace("micro_batch_size_per_gpu = 1", "micro_batch_size_per_gpu = 4"),
    )
    _clips(tmp_path / "clips", videos=3, short=0, images=8)
    where = [
        "--trainer-dir",
        str(FAKES / "diffusion-pipe"),
        "--trainer-python",
        sys.executable,
        "--vram-gb",
        "24",
    ]
    plan = run_cli("plan", "--trainer", "diffusion-pipe", "--config", str(config), *where, cwd=tmp_path)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    data = [line for line in plan.stdout.splitlines() if line.startswith("Data: ")]
    assert any("at global batch 4 (micro batch 4 x 1 accumulation" in line for line in data), plan.stdout
    assert any("The largest bucket (512x512 px area, 33 frames, at most 3 samples" in line for line in data)
    assert any(line.startswith("Data: Micro batches above 3 (a global batch above 3") for line in data)
    runs = tmp_path / "runs"
    swept = run_cli(
        "sweep", "--trainer", "diffusion-pipe", "--config", str(config), *where,
        "--max-trials", "1", "--steps", "3", "--workdir", str(runs), cwd=tmp_path,
    )  # fmt: skip
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    assert "data: diffusion-pipe drops 1 bucket(s) whole" in swept.stdout + swept.stderr  # at its start
    (report,) = runs.glob("*/report.json")
    doc = json.loads(report.read_text())
    assert [t["outcome"] for t in doc["trials"]] == ["ok"], doc["trials"]
    warnings = "\n".join(doc["warnings"])
    assert "the full run trains 8 of 11 samples" in warnings
    assert "The largest bucket (512x512 px area, 33 frames, at most 3 samples" in warnings
