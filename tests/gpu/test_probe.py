"""The probe, with NVML faked at its one seam, and the real command on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import cli
from autotune.gpu.nvml import DeviceInfo
from autotune.gpu.probe import probe, select_visible
from tests.fake_nvml import A6000, H100, RTX4090, RTX5090, FakeNvml, fake_uuid, opener

REPO = Path(__file__).resolve().parents[2]


def test_no_library_is_a_normal_answer() -> None:
    r = probe(opener(unavailable="no NVIDIA driver found (the NVML library is missing)"), env={})
    assert not r.available and r.count == 0 and r.tier is None
    text = r.render_text()
    assert "No NVIDIA GPU available: no NVIDIA driver found" in text
    assert "--vram-gb" in text and "autotune sweep" in text and "CPU" in text
    j = r.to_json()
    assert j["available"] is False and j["gpus"] == [] and j["tier"] is None and j["advice"]


def test_driver_but_no_gpu() -> None:
    r = probe(opener(FakeNvml([])), env={})
    assert r.available and r.count == 0
    assert "is loaded, but no GPU is visible" in r.render_text()
    assert "--vram-gb" in r.render_text()


def test_one_gpu() -> None:
    r = probe(opener(FakeNvml([H100])), env={})
    assert r.count == 1 and not r.mixed
    assert r.tier is not None and r.tier.tier == "80GB+" and r.tier.nominal_gb == 80
    text = r.render_text()
    assert "NVIDIA driver 550.54.15; 1 GPU visible" in text
    assert "79.6 GiB -> 80 GB class -> tier 80GB+" in text and "t2v_lora.yaml" in text
    j = r.to_json()
    assert j["tier"] == "80GB+" and j["vram_gb"] == 79.6 and j["driver_version"] == "550.54.15"
    assert j["gpus"][0] == {
        "index": 0,
        "nvml_index": 0,
        "uuid": fake_uuid(0),
        "name": H100[0],
        "memory_total_bytes": int(79.6 * 1024**3),
        "memory_total_gib": 79.6,
        "nominal_gb": 80,
    }


def test_two_mixed_cards_smallest_decides() -> None:
    r = probe(opener(FakeNvml([H100, A6000])), env={})
    assert r.count == 2 and r.mixed
    assert r.smallest is not None and r.smallest.name == A6000[0]
    assert r.tier is not None and r.tier.tier == "40-60GB"
    text = r.render_text()
    assert "Mixed cards" in text and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in text
    assert r.to_json()["mixed"] is True


def test_same_model_is_not_mixed() -> None:
    r = probe(opener(FakeNvml([H100, H100])), env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert r.count == 2 and not r.mixed and r.notes == ()


def test_below_32_shows_the_gate() -> None:
    r = probe(opener(FakeNvml([RTX4090])), env={})
    assert r.tier is not None and r.tier.tier == "below-32GB"
    assert "--force" in r.render_text()


FOUR = [H100, A6000, RTX5090, RTX4090]


@pytest.mark.parametrize(
    ("cvd", "expect_nvml", "note"),
    [
        (None, [0, 1, 2, 3], None),
        ("", [], "empty"),
        ("2", [2], None),
        ("3,1", [3, 1], None),  # CUDA order follows the variable
        (" 1 , 0 ", [1, 0], None),
        ("1,7,0", [1], "'7' is index 7"),  # invalid entry ends the list
        ("0,-1,2", [0], "neither an index"),
        ("1,1,2", [1], "repeats GPU 1"),
        (fake_uuid(2), [2], None),  # full UUID
        (fake_uuid(2)[:12], [2], None),  # unique UUID prefix
        (fake_uuid(2)[:12].upper().replace("GPU", "gpu"), [2], None),
        (f"{fake_uuid(1)},0", [1, 0], None),  # UUIDs and indices mixed
        ("GPU-deadbeef,0", [], "matches no GPU"),
        ("GPU-,0", [], "neither"),
        ("MIG-1234,0", [], "MIG"),
    ],
)
def test_cuda_visible_devices(cvd: str | None, expect_nvml: list[int], note: str | None) -> None:
    r = probe(opener(FakeNvml(FOUR)), env={} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd})
    assert [g.nvml_index for g in r.gpus] == expect_nvml
    assert [g.cuda_index for g in r.gpus] == list(range(len(expect_nvml)))
    assert r.total_on_machine == 4
    if note is None:
        assert not any("CUDA_VISIBLE_DEVICES" in n for n in r.notes)
    else:
        assert any(note in n for n in r.notes), r.notes


def test_ambiguous_uuid_prefix_stops() -> None:
    devs = [
        DeviceInfo(0, "GPU-abc1-0000", "A", 1),
        DeviceInfo(1, "GPU-abc2-0000", "A", 1),
    ]
    chosen, notes = select_visible(devs, "GPU-abc,1")
    assert chosen == [] and "shared by 2 GPUs" in notes[0] and "'1'" in notes[0]


def test_visible_devices_pick_the_tier() -> None:
    """Hiding the small card changes the tier: the tier is of what this process can use."""
    both = opener(FakeNvml([H100, RTX5090]))
    assert probe(both, env={}).tier.tier == "32GB"  # type: ignore[union-attr]
    assert probe(both, env={"CUDA_VISIBLE_DEVICES": "0"}).tier.tier == "80GB+"  # type: ignore[union-attr]
    hidden = probe(both, env={"CUDA_VISIBLE_DEVICES": ""})
    assert hidden.count == 0 and "hides all 2" in hidden.render_text()


def test_cli_probe_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import autotune.gpu.probe as probe_mod

    monkeypatch.setattr(probe_mod, "open_nvml", opener(FakeNvml([H100, H100])))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cli.main(["probe", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["count"] == 2 and j["tier"] == "80GB+" and j["mixed"] is False


def _driver_truth() -> tuple[bool, list[tuple[str, int]]]:
    """What the driver says, asked directly through pynvml: (loaded, [(name, bytes), ...])."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False, []
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        names = [pynvml.nvmlDeviceGetName(h) for h in handles]
        return True, [
            (
                name.decode() if isinstance(name, bytes) else str(name),
                int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
            )
            for name, h in zip(names, handles, strict=True)
        ]
    finally:
        pynvml.nvmlShutdown()


def test_real_probe_on_this_machine() -> None:
    """The real command, as a user runs it, agrees with the driver asked directly: no driver here is
    a clean exit 0 with the reason and the advice; a driver lists every card with its memory."""
    loaded, cards = _driver_truth()
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    out = {}
    for args in (["probe"], ["probe", "--json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "autotune", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr == ""
        out[args[-1]] = proc.stdout
    j, text = json.loads(out["--json"]), out["probe"]
    assert j["available"] is loaded
    assert [(g["name"], g["memory_total_bytes"]) for g in j["gpus"]] == cards
    assert j["count"] == j["total_on_machine"] == len(cards)
    if not loaded:
        assert j["reason"] and f"No NVIDIA GPU available: {j['reason']}." in text
    if not cards:
        assert j["tier"] is None and j["advice"]
        assert all(line in text for line in j["advice"])
    else:
        assert j["tier"] is not None and j["advice"] == []
        assert f"{len(cards)} GPU" in text and all(name in text for name, _ in cards)
        assert f"tier {j['tier']}" in text
