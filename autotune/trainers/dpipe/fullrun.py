"""What the full diffusion-pipe run trains of the user's data at a batch, and what it drops silently.

The trials train the largest bucket (``dpipe.data``), their clips repeated to fill a global batch
(``trial_repeats``), so the peak they measure is the largest bucket's whatever the batch. The full
run may train less: a bucket with fewer samples than the global batch is dropped whole, the rest
cut to whole batches, and a video too short for any video frame bucket is skipped (the rules and
their lines in ``dpipe.buckets``). ``full_run_warnings`` says so, with the counts, for the plan and
the report; it reads the folders' file headers (``dpipe.media``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from autotune.config.tomledit import TomlConfig
from autotune.errors import ConfigError
from autotune.trainers.base import Baseline
from autotune.trainers.dpipe.buckets import (
    Batch,
    Drops,
    Key,
    Layout,
    drops_at,
    label,
    largest,
    largest_kept,
    layout_of,
    scope_of,
)
from autotune.trainers.dpipe.config import read_dataset, table
from autotune.trainers.dpipe.data import keep_largest_bucket, largest_bucket, repeat_clips
from autotune.trainers.dpipe.media import Folder, read_folder
from autotune.trainers.kit.bucket import Bucket

#: The frame rate each video model resamples clips to (``framerate``: models/hunyuan_video.py:192,
#: hunyuan_video_15.py:19, ltx_video.py:25-26, ltx2.py:202, cosmos_predict2.py:193, wan/wan.py:69;
#: Wan's SkyReels and ti2v checkpoints use 24, wan.py:105-108, 164-166).
MODEL_FPS: Mapping[str, float] = {
    "hunyuan-video": 24,
    "hunyuan_video_15": 24,
    "ltx-video": 25,
    "ltx2": 24,
    "cosmos_predict2": 16,
    "wan": 16,
}


def model_fps(model: Mapping[str, Any]) -> float | None:
    kind = str(model.get("type", ""))
    if kind == "wan" and "skyreels" in Path(str(model.get("ckpt_path", ""))).name.lower():
        return 24
    return MODEL_FPS.get(kind)


def global_batch(config: Mapping[str, Any], batch_size: int, accumulation: int, data_parallel: int) -> Batch:
    """train.py:396-412 and dataset.py:956-957: images take ``image_micro_batch_size_per_gpu``
    (default the micro batch); each is times the accumulation and the data-parallel GPUs."""
    image = config.get("image_micro_batch_size_per_gpu", batch_size)
    image = image if isinstance(image, int) and not isinstance(image, bool) and image > 0 else batch_size
    return Batch(batch_size * accumulation * data_parallel, image * accumulation * data_parallel)


def trial_repeats(batch: Batch) -> int:
    """How many times a trial repeats its clips: enough that one clip fills a global batch, so no
    bucket it holds is dropped (dataset.py:392-396) and the largest one is really trained."""
    return max(batch.video, batch.image)


@dataclass(frozen=True)
class DataRead:
    """The layout of the user's data, and what the headers could not tell."""

    layout: Layout
    unread: int = 0
    no_caption: int = 0
    too_many: bool = False
    #: Per ``[[directory]]``: the longest frame bucket its clips reach, ``None`` where unknown (a
    #: file unread, size buckets, no clip, no path).
    reached: tuple[int | None, ...] = ()
    #: The longest frame bucket any directory's config lists.
    longest_listed: int = 1


def read_data(dataset: Mapping[str, Any], model: Mapping[str, Any], cwd: Path) -> DataRead:
    """Every ``[[directory]]`` read (a relative path from the trainer's folder, where it runs)."""
    layout = Layout()
    unread = no_caption = 0
    too_many = False
    reached: list[int | None] = []
    listed = 1
    fps = model_fps(model)
    for entry in dataset.get("directory") or []:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("path"), str):
            reached.append(None)
            continue
        path = Path(entry["path"]).expanduser()
        path = path if path.is_absolute() else cwd / path
        skip = bool(entry.get("skip_empty_caption", dataset.get("skip_empty_caption", True)))
        folder = _folder(str(path), _stamp(path), fps, skip)
        scope = scope_of(entry, dataset, folder.clips)
        own = layout_of([scope])
        layout.add(scope)
        known = not (folder.unread or folder.too_many or scope.size_buckets or not own.samples)
        reached.append(max(k[2] for k in own.samples) if known else None)
        listed = max(listed, *scope.frame_buckets)
        unread += folder.unread
        no_caption += folder.no_caption
        too_many = too_many or folder.too_many
    return DataRead(layout, unread, no_caption, too_many, tuple(reached), listed)


def _stamp(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


@lru_cache(maxsize=64)
def _folder(path: str, stamp: int, fps: float | None, skip_empty_caption: bool) -> Folder:
    """A folder read once per sweep (``stamp``: its mtime, so a changed folder is read again)."""
    return read_folder(Path(path), fps, skip_empty_caption=skip_empty_caption)


def full_run_warnings(data: DataRead, batch: Batch, how: str) -> list[str]:
    """Sentences for what the full run drops at ``batch`` (``how``: how the batch is made)."""
    out: list[str] = []
    if data.too_many:
        out.append(
            "diffusion-pipe data: a folder holds too many files to read here; what the full run drops "
            "at its global batch was not checked (utils/dataset.py:392-396 drops any bucket holding "
            "fewer samples than the global batch)."
        )
        return out
    drops = drops_at(data.layout, batch)
    if (now := largest(data.layout)) is not None and now[2] < data.longest_listed and not data.unread:
        out.append(
            f"diffusion-pipe data: no clip reaches the {data.longest_listed}-frame bucket: the full run trains "
            f"{now[2]} frame(s) at most (a clip trains in the longest frame bucket it reaches, "
            "utils/dataset.py:842-847); the trials trained that."
        )
    images = f", {batch.image} for images" if batch.image != batch.video else ""
    at = f"at global batch {batch.video}{images} ({how})"
    if drops.whole or drops.remainder:
        out.append(_dropped_line(drops, at))
    if drops.too_short:
        out.append(
            f"diffusion-pipe data: {drops.too_short} video(s) are shorter than the shortest video frame "
            "bucket and are skipped by the trainer (utils/dataset.py:842-850); add a shorter frame bucket "
            "to train them."
        )
    if drops.unplaced:
        out.append(
            f"diffusion-pipe data: {drops.unplaced} image(s) fit none of the size buckets it tries (one per "
            "distinct aspect ratio, in an order that need not match it: utils/dataset.py:854-872) and are "
            "skipped; add a frame-1 size bucket of their aspect ratio."
        )
    top, kept = largest(data.layout), largest_kept(data.layout, batch)
    if top is not None and (kept is None or kept[1:] != top[1:]):
        full = (
            f"peaks on {label(kept)}, lower than the trials, which repeated their clips to train the largest bucket"
            if kept is not None
            else "trains nothing: the trainer stops with 'Processed dataset was empty' (utils/dataset.py:1304-1309)"
        )
        out.append(
            f"The largest bucket ({_size(top)}, at most {_most(data, top)} samples in one AR bucket) is "
            f"dropped {at}: the full run {full}. Add clips or num_repeats, or lower the batch, for the full "
            "run to train it."
        )
    if data.unread or data.no_caption:
        parts = [f"{data.unread} file(s) whose headers are not PNG, JPEG or MP4/MOV"] if data.unread else []
        if data.no_caption:
            parts.append(f"{data.no_caption} without a caption, which the trainer skips (skip_empty_caption)")
        out.append(f"diffusion-pipe data: these counts leave out {' and '.join(parts)}.")
    return out


def _dropped_line(drops: Drops, at: str) -> str:
    worst = sorted(drops.whole.items(), key=lambda kv: -kv[1])[:3]
    whole = (
        f"drops {len(drops.whole)} bucket(s) whole ({sum(drops.whole.values())} samples, each bucket "
        f"holding fewer than its global batch; e.g. {'; '.join(f'{label(k)}: {n}' for k, n in worst)})"
        if drops.whole
        else ""
    )
    cut = f"cuts {drops.remainder} more sample(s) to whole batches" if drops.remainder else ""
    both = " and ".join(p for p in (whole, cut) if p)
    return (
        f"diffusion-pipe {both} {at}: the full run trains {drops.kept} of {drops.total} samples "
        "(clips x num_repeats x resolutions), utils/dataset.py:392-396, logged only among the caching lines."
    )


def limit_warning(data: DataRead, accumulation: int, data_parallel: int, max_batch: int) -> str | None:
    """For the plan, before a batch is picked: the micro batch above which the full run drops the
    largest (video) bucket whole, when the sweep tries batches past it."""
    top = largest(data.layout)
    if top is None or top[2] == 1:
        return None
    most = _most(data, top)
    limit = most // (accumulation * data_parallel)
    if limit >= max_batch:
        return None
    return (
        f"Micro batches above {limit} (a global batch above {most} at {accumulation} accumulation x "
        f"{data_parallel} data-parallel GPU(s)) drop the largest bucket ({_size(top)}, {most} samples at "
        f"most in one AR bucket) from the full run; the sweep tries up to {max_batch}. Its trials still "
        "measure that bucket (their clips repeated), so a winner above that trains a smaller one in full."
    )


def _size(key: Key) -> str:
    return label(key).rsplit(", AR", 1)[0]


def _most(data: DataRead, key: Key) -> int:
    """The most samples an AR bucket of ``key``'s size holds (the one that survives longest)."""
    return max(n for k, n in data.layout.samples.items() if k[1:] == key[1:])


def try_read(dataset: Mapping[str, Any], model: Mapping[str, Any], cwd: Path) -> DataRead | None:
    """``read_data``, or ``None`` where the dataset config is one the trainer itself would refuse
    (a missing key, a bad value): the checks that name those come first, this only advises."""
    try:
        return read_data(dataset, model, cwd)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError):
        return None


def trial_note(data: DataRead | None, batch: Batch, factor: int) -> str | None:
    """The trial record's ``data_note``: the clips repeated, and whether the full run at this
    batch would train the bucket the trial measured."""
    parts = (
        [f"clips repeated x{factor} so no bucket is short of a global batch of {batch.video}"]
        if factor > 1
        else []
    )
    top = largest(data.layout) if data is not None else None
    if data is not None and top is not None:
        kept = largest_kept(data.layout, batch)
        if kept is None or kept[1:] != top[1:]:
            parts.append(
                f"the full run at this batch drops this bucket ({_most(data, top)} samples at most), "
                f"so it peaks lower, on {label(kept) if kept else 'nothing'}"
            )
    return "; ".join(parts) or None


def how_batched(batch_size: int, accumulation: int, data_parallel: int) -> str:
    gpus = "GPU" if data_parallel == 1 else "GPUs"
    return f"micro batch {batch_size} x {accumulation} accumulation x {data_parallel} data-parallel {gpus}"


def trial_view(
    dataset: TomlConfig, model: Mapping[str, Any], cwd: Path, batch: Batch
) -> tuple[Bucket, str | None]:
    """Edit the trial's copy of the dataset config in place: the largest bucket only
    (``keep_largest_bucket``), its clips repeated to fill ``batch``; returns the bucket and the
    trial record's note (read from the user's data before the edit)."""
    full = try_read(dataset.data, model, cwd)
    if full is not None:
        cap_frames(dataset, full.reached)
    keep_largest_bucket(dataset)
    repeat_clips(dataset, trial_repeats(batch))
    return largest_bucket(dataset.data, dataset.source), trial_note(full, batch, trial_repeats(batch))


def cap_frames(cfg: TomlConfig, reached: Sequence[int | None]) -> None:
    """Each ``[[directory]]``'s frame buckets cut to the longest its clips reach, in place: a
    trial keeping a bucket no clip reaches would train images only (a video is never put in the
    frame-1 bucket, dataset.py:848-850) while the full run trains the shorter bucket. No clip
    changes bucket: each is in the longest it reaches (842-847), and none reaches those cut."""
    top = cfg.data.get("frame_buckets", [1])
    for scope, most in zip(cfg.table_list("directory"), reached, strict=False):
        frames = scope.get("frame_buckets", top)
        if most is None or not isinstance(frames, list):
            continue
        listed = [int(f) for f in frames]
        if max([*listed, 1]) > most:
            scope["frame_buckets"] = [f for f in listed if f <= most] or [1]


def run_warnings(
    baseline: Baseline,
    cwd: Path,
    batch_size: int,
    accumulation: int,
    data_parallel: int,
    max_batch: int | None,
) -> list[str]:
    """``full_run_warnings`` for the baseline's dataset at a batch, and ``limit_warning`` when the
    sweep's ``max_batch`` is given; none where the data cannot be read."""
    try:
        dataset = read_dataset(baseline.data, str(baseline.path or "<baseline>"), cwd)
    except ConfigError:
        return []
    full = try_read(dataset.data, table(baseline.data, "model"), cwd)
    if full is None:
        return []
    batch = global_batch(baseline.data, batch_size, accumulation, data_parallel)
    out = full_run_warnings(full, batch, how_batched(batch_size, accumulation, data_parallel))
    limit = None if max_batch is None else limit_warning(full, accumulation, data_parallel, max_batch)
    return out if limit is None else [*out, limit]
