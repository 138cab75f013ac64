"""What diffusion-pipe drops from a dataset at a global batch: pure rules, no files read.

From ``utils/dataset.py`` @ 8f83dbf:
- a clip goes to the aspect-ratio bucket nearest in log space (line 840) and to the LONGEST frame
  bucket it reaches (lines 842-847: the smallest non-negative ``frames - bucket``); a video that
  reaches only the frame-1 bucket, i.e. is shorter than the shortest video bucket, is dropped
  (lines 844-850: "being skipped because it is too short", a print); with ``size_buckets`` the
  first bucket it reaches in an order ``size_bucket_of`` spells out (lines 854-872, 464, 494-507);
- ``1`` is always a frame bucket (lines 508-511); the ARs are ``[1.0]`` without
  ``enable_ar_bucket``, ``ar_buckets`` if given, else ``geomspace(min_ar, max_ar, num_ar_buckets)``
  (lines 494-505), rounded to 3 decimals and deduplicated (lines 74-78);
- every clip is resized to every listed resolution: one size bucket per (AR, resolution, frames)
  (lines 419-433), directories with the same size bucket concatenated (lines 959-966);
- a size bucket holds ``clips x num_repeats`` samples (line 337), cut to a multiple of its global
  batch (lines 392-396: a bucket with fewer is "completely dropped", a warning among the caching
  logs); the global batch is micro batch x accumulation x data-parallel GPUs, the image micro batch
  for frame-1 buckets (lines 363-375, 956-957);
- a clip without a caption is skipped when ``skip_empty_caption`` (default true, lines 481, 755-758).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: dataset.py:36's ROUND_DECIMAL_DIGITS.
ROUND_DIGITS = 3


@dataclass(frozen=True)
class Clip:
    """One image or video as the trainer reads it: its pixels and its frames at the model's rate."""

    width: int
    height: int
    frames: int


@dataclass(frozen=True)
class Scope:
    """One ``[[directory]]``'s bucketing (its keys, else the top level's) and its clips."""

    clips: tuple[Clip, ...]
    num_repeats: float = 1
    ars: tuple[float, ...] = (1.0,)
    frame_buckets: tuple[int, ...] = (1,)
    #: Resolutions as side lengths (an area's square root, dataset.py:882-889).
    resolutions: tuple[float, ...] = (512,)
    #: ``[w, h, frames]`` size buckets; when set, ``ars``/``frame_buckets``/``resolutions`` are unused.
    size_buckets: tuple[tuple[int, int, int], ...] = ()


#: A size bucket: (AR, side length, frames) or, with size_buckets, (w/h, sqrt(w*h), frames).
Key = tuple[float, float, int]


def scope_of(scope: Mapping[str, Any], top: Mapping[str, Any], clips: Sequence[Clip]) -> Scope:
    """A ``[[directory]]`` table (and the dataset's top level) as the trainer reads them."""

    def get(key: str, default: Any = None) -> Any:
        return scope.get(key, top.get(key, default))

    sizes = get("size_buckets")
    repeats = get("num_repeats", 1)
    if sizes:
        return Scope(tuple(clips), repeats, size_buckets=tuple((int(w), int(h), int(f)) for w, h, f in sizes))
    if not get("enable_ar_bucket", False):
        ars: list[float] = [1.0]
    elif given := get("ar_buckets"):
        ars = [a[0] / a[1] if isinstance(a, (list, tuple)) else float(a) for a in given]
    else:
        lo, hi, n = float(get("min_ar")), float(get("max_ar")), int(get("num_ar_buckets"))
        ars = [lo * (hi / lo) ** (i / (n - 1)) if n > 1 else lo for i in range(n)]
    frames = sorted({*(int(f) for f in get("frame_buckets", [1])), 1})
    sides = [math.sqrt(r[0] * r[1]) if isinstance(r, (list, tuple)) else float(r) for r in get("resolutions")]
    return Scope(
        tuple(clips),
        repeats,
        ars=tuple(sorted({round(a, ROUND_DIGITS) for a in ars})),
        frame_buckets=tuple(frames),
        resolutions=tuple(sorted({round(s, ROUND_DIGITS) for s in sides})),
    )


def frame_bucket(frames: int, buckets: Sequence[int]) -> int | None:
    """The frame bucket a clip trains in, or ``None`` when dropped as too short (dataset.py:842-850)."""
    reached = [b for b in buckets if frames >= b]
    if not reached:
        return None
    best = max(reached)
    return None if frames > 1 and best == 1 else best


def _nearest_ar(clip: Clip, ars: Sequence[float]) -> float:
    log_ar = math.log(clip.width / clip.height)
    return min(ars, key=lambda a: abs(log_ar - math.log(a)))  # argmin: the first of equals


def size_bucket_of(clip: Clip, sizes: Sequence[tuple[int, int, int]]) -> Key | None:
    """dataset.py:854-872 as it runs: the buckets sorted longest frames first (line 464, stable),
    then taken in the order of ``argsort`` of the clip's distance to the sorted, deduplicated ARs
    of the buckets (lines 494-507, 856-857), a video never in a frame-1 bucket; the first whose
    frames the clip reaches. The ``argsort`` indexes the frame-sorted buckets, not the ARs it
    sorted, so a clip may land in a bucket of another AR, and only as many buckets as there are
    distinct ARs are tried: the rule followed, not the intent."""
    ordered = sorted(sizes, key=lambda b: b[2], reverse=True)
    ars = sorted({round(w / h, ROUND_DIGITS) for w, h, _ in ordered})
    log_ar = math.log(clip.width / clip.height)
    for i in sorted(range(len(ars)), key=lambda i: abs(log_ar - math.log(ars[i]))):
        w, h, f = ordered[i]
        if clip.frames > 1 and f == 1:
            continue
        if clip.frames >= f:
            return (round(w / h, ROUND_DIGITS), round(math.sqrt(w * h), ROUND_DIGITS), f)
    return None


@dataclass
class Layout:
    """Samples per size bucket over every directory, and the clips no bucket takes."""

    samples: Counter[Key] = field(default_factory=Counter)  # clips x num_repeats
    #: Videos too short for any video frame bucket.
    too_short: int = 0
    #: Images no size bucket takes (``size_bucket_of``'s order).
    unplaced: int = 0

    def add(self, scope: Scope) -> None:
        clips: Counter[Key] = Counter()
        for clip in scope.clips:
            keys = self._keys(clip, scope)
            if not keys and clip.frames > 1:
                self.too_short += 1
            elif not keys:
                self.unplaced += 1
            clips.update(keys)
        for key, n in clips.items():  # int(len * num_repeats) per directory (line 337), then summed
            self.samples[key] += int(n * scope.num_repeats)

    @staticmethod
    def _keys(clip: Clip, scope: Scope) -> list[Key]:
        if scope.size_buckets:
            key = size_bucket_of(clip, scope.size_buckets)
            return [] if key is None else [key]
        frames = frame_bucket(clip.frames, scope.frame_buckets)
        if frames is None:
            return []
        ar = _nearest_ar(clip, scope.ars)
        return [(ar, side, frames) for side in scope.resolutions]


def layout_of(scopes: Iterable[Scope]) -> Layout:
    layout = Layout()
    for scope in scopes:
        layout.add(scope)
    return layout


@dataclass(frozen=True)
class Batch:
    """The global batch of video and of image (frame-1) buckets: micro batch x accumulation x GPUs."""

    video: int
    image: int

    def of(self, key: Key) -> int:
        return self.image if key[2] == 1 else self.video


@dataclass(frozen=True)
class Drops:
    """What the trainer drops at one global batch."""

    batch: Batch
    #: Buckets dropped whole: key -> its samples (fewer than the global batch).
    whole: Mapping[Key, int]
    #: Samples cut from the buckets kept (each cut to a multiple of its global batch).
    remainder: int
    kept: int
    total: int
    too_short: int
    unplaced: int


def drops_at(layout: Layout, batch: Batch) -> Drops:
    """dataset.py:392-396 over every size bucket: ``(n // batch) * batch`` samples kept."""
    whole: dict[Key, int] = {}
    remainder = kept = total = 0
    for key, n in layout.samples.items():
        samples = n
        keep = (samples // batch.of(key)) * batch.of(key)
        total += samples
        kept += keep
        if keep == 0 and samples > 0:
            whole[key] = samples
        else:
            remainder += samples - keep
    return Drops(batch, whole, remainder, kept, total, layout.too_short, layout.unplaced)


def volume(key: Key) -> float:
    """What a bucket's activations grow with: its area times its frames."""
    return key[1] * key[1] * key[2]


def _biggest(keys: Iterable[Key]) -> Key | None:
    """The bucket of the largest ``volume``, the longer clip on a tie (``data.largest_bucket``'s rule)."""
    return max(keys, key=lambda k: (volume(k), k[2]), default=None)


def largest_kept(layout: Layout, batch: Batch) -> Key | None:
    """The largest bucket the trainer still trains at ``batch`` (what sets the full run's peak)."""
    return _biggest(k for k, n in layout.samples.items() if n >= batch.of(k))


def largest(layout: Layout) -> Key | None:
    """The largest bucket any clip lands in, before the global batch cuts any."""
    return _biggest(k for k, n in layout.samples.items() if n > 0)


def label(key: Key) -> str:
    side = round(key[1])
    frames = "1 frame" if key[2] == 1 else f"{key[2]} frames"
    return f"{side}x{side} px area, {frames}, AR {key[0]:g}"
