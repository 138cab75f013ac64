"""musubi-tuner's dataset config (TOML) and its latent caches: the largest bucket, the trial's copy.

musubi-tuner trains on cached latents: ``prepare_for_training`` globs each dataset's
``cache_directory`` for ``*_{arch}.safetensors`` and buckets every file by the size and frame
count its name carries (src/musubi_tuner/dataset/image_video_dataset.py:857-895 @ 30c658c). A
video cache is named ``{item}_{pos:05d}-{frames:03d}_{W:04d}x{H:04d}_{arch}.safetensors``
(image_video_dataset.py:166,776 @ 30c658c), an image cache ``{item}_{W:04d}x{H:04d}_{arch}...``,
and each needs its text-encoder cache ``{item}_{arch}_te.safetensors`` beside it (:876). So a
trial trains on the largest bucket by pointing a copy of the dataset TOML at a folder of links to
that bucket's caches only; the user's TOML and caches are never touched.

Keys and their fallbacks (dataset, then ``[general]``, then the defaults) are the sanitizer's
(src/musubi_tuner/dataset/config_utils.py:32-43,112-145,253 @ 30c658c): ``batch_size`` 1,
``resolution`` (960, 544), ``enable_bucket``/``bucket_no_upscale`` false, ``num_repeats`` 1.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.config.tomledit import TomlConfig
from autotune.errors import ConfigError
from autotune.trainers.kit.bucket import Bucket

#: config_utils.py:34,38,39 @ 30c658c: the dataclass defaults when neither the dataset nor [general] sets a key.
DEFAULTS: dict[str, Any] = {"resolution": (960, 544), "batch_size": 1, "num_repeats": 1}
#: bucket.py:42 @ 30c658c (Wan; HunyuanVideo's is 16 too, :41): bucket sides are multiples of this.
RESO_STEPS = 16
_VIDEO_CACHE = re.compile(
    r"^(?P<item>.+)_(?P<pos>\d+)-(?P<frames>\d+)(?:-\d+)?_(?P<w>\d+)x(?P<h>\d+)_(?P<arch>[^_]+)\.safetensors$"
)
#: Architecture -> the prefix of its cache scripts (docs/wan.md:116,145; HunyuanVideo's are the plain ones).
_CACHE_SCRIPTS = {"wan": "wan_", "hv": ""}
_IMAGE_CACHE = re.compile(r"^(?P<item>.+)_(?P<w>\d+)x(?P<h>\d+)_(?P<arch>[^_]+)\.safetensors$")


@dataclass
class CacheFile:
    path: Path
    item: str
    bucket: Bucket
    te_path: Path


@dataclass
class DatasetCaches:
    """One ``[[datasets]]`` entry's caches, grouped by bucket."""

    index: int
    cache_directory: Path
    batch_size: int
    num_repeats: int
    buckets: dict[Bucket, list[CacheFile]] = field(default_factory=dict)


def _setting(dataset: dict[str, Any], general: dict[str, Any], key: str, default: Any) -> Any:
    return dataset.get(key, general.get(key, default))


def _pair(value: Any, source: str, key: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value  # config_utils.py:103-107: a scalar means a square
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return int(value[0]), int(value[1])
    raise ConfigError(f"{source}: {key} must be a whole number or [width, height]; got {value!r}")


def _whole(value: Any, source: str, key: str) -> int:
    """A setting the trainer reads as a positive int (config_utils.py:32-43 @ 30c658c)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"{source}: {key} is {value!r}: it must be a whole number of at least 1, like 1, 2 or 4; "
            "write such a value there and run again"
        )
    return value


def _divisible(num: int, step: int) -> int:
    return num - num % step  # media_utils.py:97-98 @ 30c658c


def bucket_size(
    size: tuple[int, int], resolution: tuple[int, int], *, enable_bucket: bool, no_upscale: bool
) -> tuple[int, int]:
    """The (width, height) a cache of ``size`` trains at, as ``BucketSelector`` picks it
    (bucket.py:74-121 @ 30c658c): the one resolution without bucketing; else the bucket of the
    resolution's area with the nearest aspect ratio (a smaller image kept, to a multiple of 16,
    under ``bucket_no_upscale``)."""
    if not enable_bucket:
        return resolution
    area = resolution[0] * resolution[1]
    if no_upscale and size[0] * size[1] <= area:
        return _divisible(size[0], RESO_STEPS), _divisible(size[1], RESO_STEPS)
    side = int(math.sqrt(area))
    candidates: set[tuple[int, int]] = set()
    for w in range(_divisible(side // 2, RESO_STEPS), side + RESO_STEPS, RESO_STEPS):
        h = _divisible(area // w, RESO_STEPS)
        candidates |= {(w, h), (h, w)}
    ordered = sorted(c for c in candidates if c[0] > 0 and c[1] > 0)
    if not ordered:
        return resolution
    aspect = size[0] / size[1]
    return min(ordered, key=lambda c: abs(c[0] / c[1] - aspect))  # first of equals, as argmin


def parse_cache_name(name: str, arch: str) -> tuple[str, tuple[int, int], int] | None:
    """``(item, (W, H), frames)`` of a latent cache file name for ``arch``; None for anything else."""
    if name.endswith("_te.safetensors"):
        return None
    m = _VIDEO_CACHE.match(name)
    if m and m.group("arch") == arch:
        return m.group("item"), (int(m.group("w")), int(m.group("h"))), int(m.group("frames"))
    m = _IMAGE_CACHE.match(name)
    if m and m.group("arch") == arch:
        return m.group("item"), (int(m.group("w")), int(m.group("h"))), 1
    return None


def read_datasets(toml: TomlConfig, base: Path, arch: str) -> list[DatasetCaches]:
    """Every dataset's caches by bucket (``base``: the folder relative cache paths start from,
    the trainer's working folder)."""
    data = toml.data
    general = data.get("general") or {}
    datasets = data.get("datasets") or []
    if not isinstance(general, dict) or not isinstance(datasets, list):
        raise ConfigError(f"{toml.source}: expected a [general] table and [[datasets]] entries")
    out: list[DatasetCaches] = []
    for i, ds in enumerate(datasets):
        if not isinstance(ds, dict):
            raise ConfigError(f"{toml.source}: datasets[{i}] must be a table")
        where = f"{toml.source}: datasets[{i}]"
        folder = ds.get("cache_directory") or ds.get("video_directory") or ds.get("image_directory")
        if not isinstance(folder, str):
            raise ConfigError(
                f"{where}: no cache_directory (nor image_directory/video_directory) to read caches from"
            )
        resolution = _pair(_setting(ds, general, "resolution", DEFAULTS["resolution"]), where, "resolution")
        enable = bool(_setting(ds, general, "enable_bucket", False))
        no_upscale = bool(_setting(ds, general, "bucket_no_upscale", False))
        batch = _whole(_setting(ds, general, "batch_size", DEFAULTS["batch_size"]), where, "batch_size")
        repeats = _whole(_setting(ds, general, "num_repeats", DEFAULTS["num_repeats"]), where, "num_repeats")
        cache_dir = (base / Path(folder).expanduser()).absolute()
        entry = DatasetCaches(i, cache_dir, batch, repeats)
        try:
            names = sorted(os.listdir(cache_dir))
        except OSError:
            names = []
        for name in names:
            parsed = parse_cache_name(name, arch)
            if parsed is None:
                continue
            item, size, frames = parsed
            te = cache_dir / f"{item}_{arch}_te.safetensors"
            if not te.exists():
                continue  # the trainer skips it too, with a warning (image_video_dataset.py:877-879)
            w, h = bucket_size(size, resolution, enable_bucket=enable, no_upscale=no_upscale)
            entry.buckets.setdefault(Bucket(w, h, frames), []).append(
                CacheFile(cache_dir / name, item, Bucket(w, h, frames), te)
            )
        out.append(entry)
    return out


def largest_bucket(datasets: list[DatasetCaches]) -> tuple[DatasetCaches, Bucket] | None:
    """The dataset and bucket with the most pixels x frames (first dataset on a tie)."""
    best: tuple[DatasetCaches, Bucket] | None = None
    for ds in datasets:
        for bucket in ds.buckets:
            if best is None or (bucket.volume, bucket) > (best[1].volume, best[1]):
                best = (ds, bucket)
    return best


def set_batch_size(toml: TomlConfig, batch_size: int) -> None:
    """One batch size everywhere the file sets one (each dataset's overrides ``[general]``);
    in ``[general]`` when no dataset sets its own."""
    entries = toml.table_list("datasets")
    for entry in entries:
        if "batch_size" in entry:
            entry["batch_size"] = batch_size
    if "batch_size" in (toml.get("general") or {}) or not all("batch_size" in e for e in entries):
        toml.set("general.batch_size", batch_size)


def baseline_batch_size(toml: TomlConfig) -> int:
    """The batch the baseline trains its largest bucket with; without caches, the first dataset's."""
    data = toml.data
    general = data.get("general") or {}
    datasets = data.get("datasets") or [{}]
    value = _setting(datasets[0] if isinstance(datasets[0], dict) else {}, general, "batch_size", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{toml.source}: batch_size must be a whole number >= 1; got {value!r}")
    return value


@dataclass
class TrialView:
    """What a trial trains on: one dataset's largest bucket, linked into the trial folder."""

    bucket: Bucket
    samples: int
    links: int
    buckets: int

    def describe(self) -> str:
        text = f"bucket {self.bucket.label()} (the largest of {self.buckets})"
        if self.links != self.samples:
            text += f": {self.samples} sample(s) linked {self.links} times for full batches"
        return text


def make_trial_dataset(
    toml: TomlConfig, base: Path, arch: str, batch_size: int, trial_dir: Path
) -> tuple[str, TrialView]:
    """The trial's dataset TOML text (largest bucket only, ``batch_size`` set) and what it holds.

    Other datasets are left out; the kept one's ``cache_directory`` points at links under
    ``trial_dir/cache`` to that bucket's latent and text-encoder caches, repeated under new item
    names until a batch is full (a short run must see full batches)."""
    datasets = read_datasets(toml, base, arch)
    found = largest_bucket(datasets)
    if found is None:
        folders = ", ".join(str(d.cache_directory) for d in datasets) or "(no [[datasets]])"
        prefix = _CACHE_SCRIPTS.get(arch, "")
        raise ConfigError(
            f"{toml.source}: no latent caches for architecture {arch!r} in {folders}. musubi-tuner trains on "
            f"cached latents: run src/musubi_tuner/{prefix}cache_latents.py and "
            f"{prefix}cache_text_encoder_outputs.py with this dataset config first "
            "(docs/wan.md:107-150, 'Pre-caching'), then sweep."
        )
    chosen, bucket = found
    files = chosen.buckets[bucket]
    view_dir = trial_dir / "cache"
    view_dir.mkdir(parents=True, exist_ok=True)
    # Full batches only: the bucket's items (num_repeats counted) rounded up to whole batches, each
    # file linked under a new item name as often as that takes; num_repeats 1 then counts them once.
    wanted = math.ceil(len(files) * chosen.num_repeats / batch_size) * batch_size
    for n in range(wanted):
        f = files[n % len(files)]
        copy = n // len(files)
        item = f.item if copy == 0 else f"autotune{copy}-{f.item}"
        _link(f.path, view_dir / f"{item}{f.path.name[len(f.item) :]}")
        _link(f.te_path, view_dir / f"{item}_{arch}_te.safetensors")
    links = wanted
    entries = toml.table_list("datasets")
    keep = entries[chosen.index]
    keep["cache_directory"] = str(view_dir)
    if chosen.num_repeats != 1:
        keep["num_repeats"] = 1
    aot = toml._doc["datasets"]  # the array of tables: drop every other dataset
    for i in reversed(range(len(entries))):
        if i != chosen.index:
            del aot[i]
    set_batch_size(toml, batch_size)
    view = TrialView(bucket, len(files), links, sum(len(d.buckets) for d in datasets))
    return toml.text, view


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)
