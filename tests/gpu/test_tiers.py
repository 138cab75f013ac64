"""The tier table and its one pure function: reported sizes -> nominal class -> tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigError
from autotune.gpu.tiers import TIER_IDS, TierTable, classify, load_tier_table, nominal_class

# reported GiB (NVML or --vram-gb), nominal class (None: no class fits), tier, baseline, relax
CASES = [
    (31.8, 32, "32GB", "low_vram", False),  # RTX 5090
    (32, 32, "32GB", "low_vram", False),
    (30.0, 32, "32GB", "low_vram", False),  # a 32 GB card with ECC on
    (36, None, "32GB", "low_vram", False),  # no such card: tiered by the reading
    (39.4, 40, "40-60GB", "low_vram", True),  # A100 40GB PCIe
    (40, 40, "40-60GB", "low_vram", True),
    (45, 48, "40-60GB", "low_vram", True),  # L40S with ECC (45.0 GiB)
    (48, 48, "40-60GB", "low_vram", True),
    (47.99, 48, "40-60GB", "low_vram", True),  # RTX A6000
    (64, 64, "40-60GB", "low_vram", True),  # between tiers: starts like 40-60GB
    (72, 72, "40-60GB", "low_vram", True),
    (79.6, 80, "80GB+", "standard", False),  # H100 80GB
    (80, 80, "80GB+", "standard", False),
    (93.6, 94, "80GB+", "standard", False),  # H100 NVL
    (139.8, 141, "80GB+", "standard", False),  # H200 as torch reports it
    (140.4, 141, "80GB+", "standard", False),  # H200 as NVML reports it
    (141, 141, "80GB+", "standard", False),
    (179.1, 180, "80GB+", "standard", False),  # B200
    (1000, None, "80GB+", "standard", False),  # bigger than any class
    (24, 24, "below-32GB", "low_vram", False),  # RTX 4090
    (23.99, 24, "below-32GB", "low_vram", False),
    (22.49, 24, "below-32GB", "low_vram", False),  # A10G (ECC)
    (15.0, 16, "below-32GB", "low_vram", False),  # T4
    (0.5, None, "below-32GB", "low_vram", False),
    (29.0, None, "below-32GB", "low_vram", False),  # too far under 32 to be a 32 GB card
]


@pytest.mark.parametrize(("reported", "nominal", "tier", "baseline", "relax"), CASES)
def test_classify(reported: float, nominal: float | None, tier: str, baseline: str, relax: bool) -> None:
    info = classify(reported)
    assert info.tier == tier
    assert info.known_class == (nominal is not None)
    assert info.nominal_gb == (nominal if nominal is not None else round(reported, 1))
    assert info.baseline == baseline
    assert info.relax == relax
    assert info.supported == (tier != "below-32GB")
    assert info.tier in TIER_IDS


@pytest.mark.parametrize(
    ("reported", "file"),
    [(31.8, "t2v_lora_low_vram.yaml"), (48, "t2v_lora_low_vram.yaml"), (79.6, "t2v_lora.yaml")],
)
def test_baseline_file_per_trainer(reported: float, file: str) -> None:
    info = classify(reported)
    assert info.baseline_file("ltx2") == file
    assert info.baseline_file("reference").startswith("reference/")
    with pytest.raises(ConfigError, match="no baseline files for trainer 'nope'"):
        info.baseline_file("nope")


def test_between_tiers_and_shortfall_notes() -> None:
    assert classify(64).between_tiers and "between the named tiers" in classify(64).notes[0]
    assert not classify(48).between_tiers and classify(48).notes == ()
    assert any("ECC" in n for n in classify(45).notes)
    assert any("no known card class" in n for n in classify(36).notes)
    assert classify(79.6).notes == ()  # the driver's reserve is normal, not worth a note


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_classify_rejects_nonsense(bad: float) -> None:
    with pytest.raises(ValueError, match="positive finite"):
        classify(bad)


def test_nominal_class_boundaries() -> None:
    table = load_tier_table()
    assert nominal_class(32 * 1.01, table) == 32  # rounding above the class
    assert nominal_class(32 * 1.011, table) is None  # past it, and too far under 40
    assert nominal_class(32 * 0.93, table) == 32
    assert nominal_class(32 * 0.929, table) is None


def test_table_is_data(tmp_path: Path) -> None:
    """A different table changes the verdict: the function reads the data, not constants."""
    shipped = load_yaml((Path(__file__).parents[2] / "configs" / "tiers.yaml").read_text(), "t")
    shipped["tiers"][1]["from_gb"] = 24
    table = TierTable.from_data(shipped, "custom")
    assert classify(24, table).tier == "32GB"
    assert classify(24).tier == "below-32GB"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("classes"), "malformed tier table"),
        (lambda d: d["tiers"].reverse(), "smallest first"),
        (lambda d: d["tolerance"].update(under=1.5), "fractions"),
        (lambda d: d["tiers"][0].update(baseline="tiny"), "missing in baselines"),
    ],
)
def test_malformed_table_is_config_error(tmp_path: Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    data = load_yaml((Path(__file__).parents[2] / "configs" / "tiers.yaml").read_text(), "t")
    mutate(data)
    with pytest.raises(ConfigError, match=message):
        TierTable.from_data(data, "bad.yaml")


def test_load_tier_table_from_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read tier table"):
        load_tier_table(tmp_path / "nope.yaml")
