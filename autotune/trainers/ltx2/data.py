"""The LTX-2 trainer's preprocessed data, as its training strategy reads it: which folders, how many samples.

One rule for ``autotune plan`` (which folders must exist) and the adapter (the largest batch the data
allows). It follows Lightricks/LTX-2 at 400fd31, ``packages/ltx-trainer/src/ltx_trainer/``:
- the folders are the strategy's ``get_data_sources()``: ``text_to_video`` (the default when
  ``training_strategy`` or its ``name`` is left out, config.py:310-314) reads ``latents`` and
  ``conditions``, plus ``audio_latents_dir`` with ``with_audio`` (training_strategies/text_to_video.py:48-58);
  ``video_to_video`` adds ``reference_latents_dir`` (video_to_video.py:42-48); ``flexible`` reads
  ``conditions``, each modality's ``latents_dir`` and each reference or mask condition's folder
  (flexible.py:187-208);
- a sample is a ``.pt`` file anywhere under the primary folder (``latents`` when read, else the
  first) whose path relative to it also exists in every other folder, ``latent_X.pt`` mapping to
  ``condition_X.pt`` in ``conditions`` (datasets.py:158-232); a ``.precomputed`` folder under the
  root is used in its place (datasets.py:116-128). Every other file is not a sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

PRECOMPUTED_DIR = ".precomputed"


def data_sources(config: Mapping[str, Any]) -> list[str]:
    """The folders under ``data.preprocessed_data_root`` that the config's training strategy reads,
    in the trainer's order."""
    strategy = config.get("training_strategy")
    strategy = strategy if isinstance(strategy, Mapping) else {}
    name = strategy.get("name", "text_to_video")
    if name == "flexible":
        dirs = ["conditions"]
        modalities: list[Mapping[str, Any]] = [
            m for m in (strategy.get("video"), strategy.get("audio")) if isinstance(m, Mapping)
        ]
        dirs += [str(m["latents_dir"]) for m in modalities if m.get("latents_dir")]
        for modality in modalities:
            for cond in modality.get("conditions") or []:
                if not isinstance(cond, Mapping):
                    continue
                key = {"reference": "latents_dir", "mask": "mask_dir"}.get(str(cond.get("type")))
                if key and cond.get(key):
                    dirs.append(str(cond[key]))
        return list(dict.fromkeys(dirs))
    dirs = ["latents", "conditions"]
    if name == "video_to_video":
        dirs.append(str(strategy.get("reference_latents_dir", "reference_latents")))
    elif strategy.get("with_audio", False):
        dirs.append(str(strategy.get("audio_latents_dir", "audio_latents")))
    return list(dict.fromkeys(dirs))


def data_root(root: Path) -> Path:
    """The folder the sources are read from: ``root/.precomputed`` when there is one."""
    return root / PRECOMPUTED_DIR if (root / PRECOMPUTED_DIR).exists() else root


def count_samples(root: Path, sources: list[str]) -> int | None:
    """Samples the trainer would find under ``root``; None when a source folder is missing (the
    trainer stops on that before counting) or the folders cannot be read."""
    if not sources:
        return None
    base = data_root(root)
    try:
        if not all((base / name).is_dir() for name in sources):
            return None
        primary = "latents" if "latents" in sources else sources[0]
        others = {name: relative_pt_files(base / name) for name in sources if name != primary}
        count = 0
        for rel in relative_pt_files(base / primary):
            if all(expected_file(name, rel) in files for name, files in others.items()):
                count += 1
        return count
    except OSError:
        return None


def relative_pt_files(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.glob("**/*.pt")}


def expected_file(source: str, rel: Path) -> Path:
    """The file a sample needs in ``source``: the same path, but ``condition_X.pt`` for a
    ``latent_X.pt`` in ``conditions`` (a legacy layout, kept at the folder's top as the trainer does)."""
    if source == "conditions" and rel.name.startswith("latent_"):
        return Path(f"condition_{rel.stem[7:]}.pt")
    return rel
