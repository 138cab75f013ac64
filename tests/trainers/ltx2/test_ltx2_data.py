"""Samples and data folders as the LTX-2 trainer counts them (datasets.py:116-232 and the
strategies' ``get_data_sources``; see ``autotune/trainers/ltx2/data.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.core.yamltext import load_yaml
from autotune.trainers.ltx2.data import count_samples, data_sources


def _touch(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


@pytest.mark.parametrize(
    ("strategy", "dirs"),
    [
        pytest.param(None, ["latents", "conditions"], id="default-text-to-video"),
        pytest.param(
            {"with_audio": True}, ["latents", "conditions", "audio_latents"], id="no-name-with-audio"
        ),
        pytest.param(
            {"name": "text_to_video", "with_audio": True, "audio_latents_dir": "aud"},
            ["latents", "conditions", "aud"],
            id="t2v-audio-dir",
        ),
        pytest.param({"name": "video_to_video"}, ["latents", "conditions", "reference_latents"], id="v2v"),
        pytest.param(
            {
                "name": "flexible",
                "video": {
                    "is_generated": True,
                    "latents_dir": "latents",
                    "conditions": [
                        {"type": "reference", "latents_dir": "reference_latents"},
                        {"type": "mask", "mask_dir": "masks"},
                        {"type": "first_frame"},
                    ],
                },
                "audio": {"is_generated": False, "latents_dir": "audio_latents"},
            },
            ["conditions", "latents", "audio_latents", "reference_latents", "masks"],
            id="flexible",
        ),
    ],
)
def test_data_sources_follow_the_strategy(strategy: dict[str, Any] | None, dirs: list[str]) -> None:
    config = {} if strategy is None else {"training_strategy": strategy}
    assert data_sources(config) == dirs


def test_shipped_configs_read_the_folders_they_document(ltx2_fixtures: Path) -> None:
    """The folders each shipped config's header comment lists under ``preprocessed_data_root/``."""
    got = {
        name: data_sources(load_yaml((ltx2_fixtures / name).read_text(), name))
        for name in ("t2v_lora.yaml", "t2v_lora_low_vram.yaml", "i2v_lora.yaml", "v2v_ic_lora.yaml")
    }
    audio = ["conditions", "latents", "audio_latents"]
    assert got == {
        "t2v_lora.yaml": audio,
        "t2v_lora_low_vram.yaml": audio,
        "i2v_lora.yaml": audio,
        "v2v_ic_lora.yaml": ["conditions", "latents", "reference_latents"],
    }


def test_only_pt_files_matched_in_every_source_count(tmp_path: Path) -> None:
    _touch(
        tmp_path,
        "latents/a.pt",
        "latents/sub/b.pt",
        "latents/c.pt",  # no condition
        "latents/notes.txt",  # not a .pt file
        "latents/.DS_Store",
        "latents/latent_7.pt",  # legacy naming: its condition is condition_7.pt
        "conditions/a.pt",
        "conditions/sub/b.pt",
        "conditions/condition_7.pt",
        "audio_latents/a.pt",
    )
    assert count_samples(tmp_path, ["latents", "conditions"]) == 3
    assert count_samples(tmp_path, ["latents", "conditions", "audio_latents"]) == 1
    assert count_samples(tmp_path, ["latents", "conditions", "missing"]) is None  # the trainer stops


def test_a_precomputed_folder_is_read_in_place_of_the_root(tmp_path: Path) -> None:
    _touch(
        tmp_path,
        "latents/x.pt",
        "conditions/x.pt",
        ".precomputed/latents/a.pt",
        ".precomputed/conditions/a.pt",
    )
    _touch(tmp_path, ".precomputed/latents/b.pt", ".precomputed/conditions/b.pt")
    assert count_samples(tmp_path, ["latents", "conditions"]) == 2


def test_flexible_without_latents_counts_from_its_first_source(tmp_path: Path) -> None:
    _touch(tmp_path, "conditions/a.pt", "conditions/b.pt", "video/a.pt")
    assert count_samples(tmp_path, ["conditions", "video"]) == 1
