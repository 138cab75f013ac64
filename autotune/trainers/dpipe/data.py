"""diffusion-pipe's dataset TOML: find its largest (resolution, frames) bucket and keep only that.

A trial must see the largest sample the full run sees, so it trains on the largest bucket alone.
How diffusion-pipe buckets (``utils/dataset.py`` @ 8f83dbf):
- ``resolutions`` are areas: a side length (``512`` is 512x512 px) or a ``[w, h]`` pair whose
  area counts (lines 882-889); every image/video is resized to EVERY listed area (the list is
  a multi-resolution duplication, examples/dataset.toml), so the largest area is trained.
- ``frame_buckets``: a video goes to the longest bucket it reaches; ``1`` (images) is always added
  (lines 508-513). Aspect-ratio buckets keep the area (lines 419-425), so they are not sizes.
- ``size_buckets`` (``[w, h, frames]``, cosmos_dataset.toml) replace both (lines 460-466).
- Every key may be set per ``[[directory]]``, overriding the top level (lines 458-508).
The trial's copy keeps the largest area (and, for size buckets, the largest ``w*h*frames``) and the
longest frame bucket, in each place they are set. Images still train in the frame-1 bucket the
real code adds; a video trains in the longest frame bucket it reaches and never in the frame-1
one (dataset.py ``_find_closest_ar_bucket``), so before this cut ``dpipe.fullrun.cap_frames`` drops
the frame buckets no clip reaches (else a dataset of clips shorter than the longest bucket would
train images only in the trial, and more in the full run).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.config.tomledit import TomlConfig
from autotune.errors import ConfigError
from autotune.trainers.kit.bucket import Bucket


def describe(bucket: Bucket) -> str:
    """The largest bucket as the trial record names it: the configured area and the frames."""
    frames = "1 frame (images)" if bucket.frames == 1 else f"{bucket.frames} frames"
    return f"{bucket.width}x{bucket.height} px area, {frames}"


def _area(res: Any, where: str) -> tuple[int, int]:
    """A ``resolutions`` entry as (w, h): a side length or a pair (dataset.py:882-889)."""
    if isinstance(res, bool):
        raise ConfigError(f"{where}: a resolution is a side length or [width, height]; got {res!r}")
    if isinstance(res, (int, float)):
        return int(res), int(res)
    if isinstance(res, list) and len(res) == 2 and all(isinstance(v, (int, float)) for v in res):
        return int(res[0]), int(res[1])
    raise ConfigError(f"{where}: a resolution is a side length or [width, height]; got {res!r}")


def _frames(values: Any, where: str) -> list[int]:
    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    ):
        raise ConfigError(
            f"{where}: frame_buckets must be a list of whole numbers like [1, 33]; got {values!r}"
        )
    return [*values, 1]  # 1 is always there (dataset.py:509-511)


def _size_bucket(value: Any, where: str) -> tuple[int, int, int]:
    if (
        isinstance(value, list)
        and len(value) == 3
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return value[0], value[1], value[2]
    raise ConfigError(f"{where}: each size bucket is [width, height, frames]; got {value!r}")


def _scope_bucket(scope: Mapping[str, Any], top: Mapping[str, Any], where: str) -> Bucket:
    """The largest bucket one ``[[directory]]`` trains on (its keys, else the top level's)."""
    sizes = scope.get("size_buckets", top.get("size_buckets"))
    if sizes is not None:
        if not isinstance(sizes, list) or not sizes:
            raise ConfigError(f"{where}: size_buckets must be a non-empty list of [width, height, frames]")
        w, h, f = max((_size_bucket(s, where) for s in sizes), key=lambda b: (b[0] * b[1] * b[2], b[2]))
        return Bucket(w, h, f)
    resolutions = scope.get("resolutions", top.get("resolutions"))
    if not isinstance(resolutions, list) or not resolutions:
        raise ConfigError(
            f"{where}: no resolutions (diffusion-pipe needs `resolutions = [512]` at the top of the "
            "dataset config or in each [[directory]])"
        )
    w, h = max((_area(r, where) for r in resolutions), key=lambda wh: wh[0] * wh[1])
    frames = max(_frames(scope.get("frame_buckets", top.get("frame_buckets", [1])), where))
    return Bucket(w, h, frames)


def largest_bucket(dataset: Mapping[str, Any], source: str = "<dataset>") -> Bucket:
    """The largest (area, frames) bucket over every ``[[directory]]`` of a dataset config."""
    directories = dataset.get("directory")
    if not isinstance(directories, list) or not directories:
        raise ConfigError(f"{source}: no [[directory]] entries; diffusion-pipe has nothing to train on")
    buckets = [
        _scope_bucket(d if isinstance(d, Mapping) else {}, dataset, f"{source} [[directory]] #{i + 1}")
        for i, d in enumerate(directories)
    ]
    return max(buckets, key=lambda b: (b.volume, b.frames))


def keep_largest_bucket(cfg: TomlConfig) -> Bucket:
    """Edit the dataset config in place so it trains on its largest bucket only; returns it.

    Each place that sets ``resolutions``/``frame_buckets``/``size_buckets`` (the top level, a
    ``[[directory]]``) keeps its own largest entry, so a directory override still applies."""
    data = cfg.data
    bucket = largest_bucket(data, cfg.source)
    for i, scope in enumerate([data, *cfg.table_list("directory")]):
        where = f"{cfg.source} [[directory]] #{i}" if i else cfg.source
        _restrict_scope(cfg, scope, where, top=i == 0)
    return bucket


def _restrict_scope(cfg: TomlConfig, scope: Any, where: str, *, top: bool) -> None:
    def put(key: str, value: Any) -> None:
        if top:
            cfg.set(key, value)
        else:
            scope[key] = value

    sizes = scope.get("size_buckets")
    if isinstance(sizes, list) and sizes:
        w, h, f = max((_size_bucket(list(s), where) for s in sizes), key=lambda b: (b[0] * b[1] * b[2], b[2]))
        put("size_buckets", [[w, h, f]])
    resolutions = scope.get("resolutions")
    if isinstance(resolutions, list) and resolutions:
        plain = [r if isinstance(r, (int, float)) else list(r) for r in resolutions]
        best = max(plain, key=lambda r: math.prod(_area(r, where)))
        put("resolutions", [best])
    frames = scope.get("frame_buckets")
    if isinstance(frames, list) and frames:
        put("frame_buckets", [max(_frames(list(frames), where))])


def repeat_clips(cfg: TomlConfig, factor: int) -> None:
    """Multiply every ``[[directory]]``'s ``num_repeats`` (its own, else the top level's, else 1:
    dataset.py:735) by ``factor`` in place, so each bucket holds at least ``factor`` samples per
    clip: a trial's bucket is never dropped for holding fewer than its global batch (dataset.py:
    392-396). Repeats cost no caching (a sample is ``idx % len``, dataset.py:310)."""
    if factor <= 1:
        return
    top = cfg.data.get("num_repeats", 1)
    for scope in cfg.table_list("directory"):
        own = scope.get("num_repeats", top)
        scope["num_repeats"] = (
            own * factor if isinstance(own, (int, float)) and not isinstance(own, bool) else factor
        )
