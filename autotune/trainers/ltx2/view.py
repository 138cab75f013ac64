"""The trial data view: the preprocessed data cut down to its largest bucket, as symlinks.

Resolution buckets and frame counts are fixed at preprocessing (process_videos.py:99-133, 308-330
in Lightricks/LTX-2 at 400fd31) and set most of a step's memory: a short trial that samples a few
random batches may never meet the largest. So a trial trains on a folder that holds only the
samples of the largest bucket (most latent tokens, frames x height x width), each file a symlink
to the user's, never a copy. The trainer's ``DataLoader`` stacks a batch with the default collate
(trainer.py:675-695: ``batch_size``, ``shuffle``, ``drop_last``), so every batch of the trial is a
full batch of the largest shape: a config that fits it fits every batch of the run.

When the largest bucket holds fewer samples than the trial consumes, its samples are linked
again under new names until the loader can serve every micro-step of the trial in one pass
(``samples_for_trial``): still links, and still the largest shape in every slot (the run itself
would stack that bucket with others only if they shared its shape). A view of one batch would
make the trainer restart its loader every step (``StopIteration`` -> ``iter(dataloader)``,
trainer.py:218-222), and the restart would land in the measured step time. The record says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from autotune.trainers.ltx2.data import data_root, expected_file, relative_pt_files
from autotune.trainers.ltx2.latents import LatentShape, latent_shape

VIEW_DIR = "data-view"
_COPY_MARK = "__autotune_link"
#: At most this many samples in a view (links per source folder); past it a long trial restarts
#: its loader every few hundred steps, which the steady step time hardly sees.
MAX_VIEW_SAMPLES = 4096


def samples_for_trial(per_micro_step: int, micro_steps: int) -> int:
    """How many samples a view needs so the trainer's loader (``drop_last``, trainer.py:685-693)
    serves all ``micro_steps`` of a trial in one pass, with one batch to spare for accelerate's
    prefetch: ``per_micro_step`` (batch size x GPUs) each, capped at ``MAX_VIEW_SAMPLES``."""
    wanted = per_micro_step * (max(0, micro_steps) + 1)
    return max(per_micro_step, min(MAX_VIEW_SAMPLES, wanted))


@dataclass(frozen=True)
class Buckets:
    """The samples of each latent shape found under the primary source (sorted paths)."""

    by_shape: dict[LatentShape, list[Path]]
    unreadable: int  # sample files whose shape could not be read

    @property
    def largest(self) -> LatentShape | None:
        return max(self.by_shape, key=lambda s: (s.tokens, s.frames)) if self.by_shape else None


@dataclass(frozen=True)
class DataView:
    """What the trial trains on: where, which bucket, how many samples and links."""

    root: Path
    bucket: LatentShape
    samples: int  # distinct samples of the bucket
    links: int  # samples in the view (more than ``samples`` when repeated to fill a batch)
    buckets: int  # how many buckets the data has

    def describe(self) -> str:
        text = f"latent bucket {self.bucket.label()} (frames x height x width, the largest of {self.buckets})"
        if self.links > self.samples:
            text += (
                f": {self.samples} sample(s) linked {self.links} times, so the loader serves the "
                "whole trial without a restart"
            )
        return text


def read_buckets(root: Path, sources: list[str]) -> Buckets | None:
    """Group the trainer's samples by latent shape; None without a readable primary source."""
    if not sources:
        return None
    base = data_root(root)
    primary = "latents" if "latents" in sources else sources[0]
    if primary != "latents" or not all((base / s).is_dir() for s in sources):
        return None  # only video latents carry the shape we rank by
    try:
        others = {s: relative_pt_files(base / s) for s in sources if s != primary}
        rels = sorted(relative_pt_files(base / primary))
    except OSError:
        return None
    by_shape: dict[LatentShape, list[Path]] = {}
    unreadable = 0
    for rel in rels:
        if not all(expected_file(s, rel) in files for s, files in others.items()):
            continue  # not a sample for the trainer
        shape = latent_shape(base / primary / rel)
        if shape is None:
            unreadable += 1
        else:
            by_shape.setdefault(shape, []).append(rel)
    return Buckets(by_shape, unreadable) if by_shape else None


def build_view(
    root: Path, sources: list[str], dest: Path, needed: int, buckets: Buckets | None = None
) -> DataView | None:
    """Link the largest bucket's samples into ``dest`` (each source folder beside the others),
    at least ``needed`` of them (``buckets``: ``read_buckets``' answer, read once per sweep).
    None when a sample's shape cannot be read: it might be the largest, so the trial then trains
    on ``root`` itself."""
    buckets = buckets if buckets is not None else read_buckets(root, sources)
    if buckets is None or buckets.largest is None or buckets.unreadable:
        return None
    bucket = buckets.largest
    chosen = buckets.by_shape[bucket]
    base = data_root(root).resolve()
    count = max(len(chosen), needed)
    for i in range(count):
        rel = chosen[i % len(chosen)]
        name = rel if i < len(chosen) else rel.with_name(f"{rel.stem}{_COPY_MARK}{i // len(chosen)}.pt")
        for source in sources:
            target = base / source / expected_file(source, rel)
            link = dest / source / expected_file(source, name)
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            os.symlink(target, link)
    return DataView(dest, bucket, len(chosen), count, len(buckets.by_shape))


class ViewCache:
    """``build_view`` with each data root's buckets read once per sweep, not once per trial."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, tuple[str, ...]], Buckets | None] = {}

    def build(self, root: Path, sources: list[str], trial_dir: Path, needed: int) -> DataView | None:
        """The view under ``trial_dir`` (``VIEW_DIR``) of ``needed`` samples of the largest bucket."""
        key = (str(root), tuple(sources))
        if key not in self._buckets:  # every sample file is opened once per sweep
            self._buckets[key] = read_buckets(root, sources)
        return build_view(root, sources, trial_dir / VIEW_DIR, needed, self._buckets[key])
