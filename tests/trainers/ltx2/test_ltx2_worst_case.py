"""Worst-case data for LTX-2 trials: the latents' shapes read without torch, and
a trial data view of the largest bucket made of links.

The latent files are written by real ``torch.save`` in the layout of the trainer's
``process_videos.py`` (l.567-575): ``{"latents": [C, F, H, W], "num_frames", "height", "width",
"fps"}``."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autotune.trainers import get_adapter
from autotune.trainers.ltx2.latents import LatentShape, latent_shape
from autotune.trainers.ltx2.view import VIEW_DIR, build_view, read_buckets
from tests.helpers import FAKES

pytestmark = [pytest.mark.torch, pytest.mark.untimed]  # untimed: scripts/test.sh runs it on two workers

SMALL, LARGE = (4, 16, 16), (13, 16, 28)  # latent frames x height x width


def _latent(path: Path, shape: tuple[int, int, int], *, legacy: bool = False) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    f, h, w = shape
    tensor = torch.zeros(f * h * w, 128) if legacy else torch.zeros(128, f, h, w, dtype=torch.bfloat16)
    torch.save({"latents": tensor, "num_frames": f, "height": h, "width": w, "fps": 24.0}, path)


def _condition(path: Path) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"prompt_embeds": torch.zeros(4, 8), "prompt_attention_mask": torch.ones(4)}, path)


def _dataset(root: Path, small: int, large: int) -> Path:
    for i in range(small + large):
        _latent(root / "latents" / f"s{i:02d}.pt", LARGE if i >= small else SMALL)
        _condition(root / "conditions" / f"s{i:02d}.pt")
    _latent(root / "latents" / "orphan.pt", (99, 99, 99))  # no condition: not a sample
    return root


def test_shapes_are_read_without_torch_and_foreign_code_is_refused(tmp_path: Path) -> None:
    _latent(tmp_path / "new.pt", LARGE)
    _latent(tmp_path / "legacy.pt", SMALL, legacy=True)
    evil = tmp_path / "evil.pt"
    with zipfile.ZipFile(evil, "w") as z:  # a torch.save-like zip whose pickle calls os.system
        z.writestr("evil/data.pkl", pickle.dumps(_Evil(tmp_path / "pwned")))
    code = (
        "import sys; from pathlib import Path; from autotune.trainers.ltx2.latents import latent_shape\n"
        f"print([latent_shape(Path(p)) for p in {[str(tmp_path / n) for n in ('new.pt', 'legacy.pt', 'evil.pt')]!r}])\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, env=os.environ
    )
    shapes, torch_loaded = done.stdout.splitlines()
    assert shapes == f"[{LatentShape(*LARGE)!r}, {LatentShape(*SMALL)!r}, None]"
    assert torch_loaded == "False"
    assert not (tmp_path / "pwned").exists()
    assert latent_shape(tmp_path / "missing.pt") is None


class _Evil:
    """Unpickling it would run a shell command (what a restricted Unpickler must never do)."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.target}",))


def test_the_view_links_only_the_largest_bucket(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "data", small=5, large=3)
    buckets = read_buckets(root, ["latents", "conditions"])
    assert buckets is not None and buckets.largest == LatentShape(*LARGE)
    assert {s.label(): len(v) for s, v in buckets.by_shape.items()} == {"4x16x16": 5, "13x16x28": 3}
    view = build_view(root, ["latents", "conditions"], tmp_path / "view", needed=2)
    assert view is not None and (view.samples, view.links, view.buckets) == (3, 3, 2)
    for source in ("latents", "conditions"):
        files = sorted((tmp_path / "view" / source).iterdir())
        assert [f.name for f in files] == ["s05.pt", "s06.pt", "s07.pt"]
        for f in files:
            assert f.is_symlink() and f.resolve() == (root / source / f.name).resolve()  # a link, not a copy
    assert "latent bucket 13x16x28" in view.describe() and "linked" not in view.describe()


def test_a_bucket_smaller_than_the_batch_is_linked_again_to_fill_it(tmp_path: Path) -> None:
    root = tmp_path / "data"
    for i, shape in enumerate([SMALL, SMALL, LARGE]):  # legacy names: latent_X.pt <-> condition_X.pt
        _latent(root / "latents" / f"latent_{i}.pt", shape)
        _condition(root / "conditions" / f"condition_{i}.pt")
    view = build_view(root, ["latents", "conditions"], tmp_path / "view", needed=4)
    assert view is not None and (view.samples, view.links) == (1, 4)
    latents = sorted(p.name for p in (tmp_path / "view" / "latents").iterdir())
    conditions = sorted(p.name for p in (tmp_path / "view" / "conditions").iterdir())
    assert len(latents) == len(conditions) == 4
    assert all(n.startswith("latent_2") for n in latents) and all(
        n.startswith("condition_2") for n in conditions
    )
    assert {(tmp_path / "view" / "latents" / n).resolve() for n in latents} == {
        (root / "latents" / "latent_2.pt").resolve()
    }
    assert "1 sample(s) linked 4 times" in view.describe()
    from autotune.trainers.ltx2.data import count_samples

    assert count_samples(tmp_path / "view", ["latents", "conditions"]) == 4  # the trainer sees a full batch


def test_a_sample_whose_shape_cannot_be_read_keeps_the_trial_on_all_the_data(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "data", small=2, large=1)
    (root / "latents" / "old.pt").write_bytes(b"not a zip: torch's legacy format, say")
    _condition(root / "conditions" / "old.pt")
    buckets = read_buckets(root, ["latents", "conditions"])
    assert buckets is not None and buckets.unreadable == 1
    assert build_view(root, ["latents", "conditions"], tmp_path / "view", needed=1) is None


@pytest.mark.process
def test_a_trial_trains_on_the_largest_bucket_only(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "data", small=5, large=2)
    adapter = get_adapter("ltx2", trainer_dir=FAKES / "ltx2-trainer", launcher=[sys.executable])
    baseline = adapter.baseline_from_text(
        f"optimization: {{steps: 2000, batch_size: 1}}\ndata: {{preprocessed_data_root: {root}}}\n"
        "output_dir: outputs/x\n"
    )
    trial = tmp_path / "trial"
    spec = adapter.render(
        baseline, {"batch_size": 4}, gradient_accumulation_steps=1, steps=20, trial_dir=trial
    )
    done = subprocess.run(
        spec.argv, cwd=spec.cwd, env={**os.environ, **spec.env}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads((trial / "output" / "fake_trained_on.json").read_text())
    # batch 4 x (20 steps + the loader's prefetch): the 2 samples, linked for one pass of the trial
    assert seen == {"samples": 84, "shapes": [list(LARGE)] * 84}
    record = json.loads((trial / "adapter.json").read_text())
    assert record["data_bucket"].startswith(
        "latent bucket 13x16x28 (frames x height x width, the largest of 2)"
    )
    assert (trial / VIEW_DIR / "latents").is_dir() and not any(
        p.is_file() and not p.is_symlink() for p in (trial / VIEW_DIR).rglob("*")
    )
    off = get_adapter("ltx2", trainer_dir=FAKES / "ltx2-trainer", launcher=[sys.executable], data_view=False)
    off.render(
        baseline, {"batch_size": 4}, gradient_accumulation_steps=1, steps=20, trial_dir=tmp_path / "t2"
    )
    assert str(root) in (tmp_path / "t2" / "config.yaml").read_text()


def test_the_report_names_the_bucket_judged_and_the_phase(tmp_path: Path) -> None:
    from autotune.report.model import TrialRow
    from autotune.report.phases import phase_lines
    from autotune.sweep.measure import memory_note

    folder = tmp_path / "trial-0003"
    folder.mkdir()
    (folder / "adapter.json").write_text(
        json.dumps(
            {
                "validation_step": 2,
                "data_bucket": "latent bucket 13x16x28 (frames x height x width, the largest of 2)",
            }
        )
    )
    events = [{"event": "step", "step": n, "max_memory_reserved_gb": 30.0 + n, "pid": 7} for n in (1, 2, 3)]
    events.append({"event": "exit", "steps": 3, "max_memory_reserved_gb": 33.0, "pid": 7})
    (folder / "hook.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    judged = memory_note(folder)  # recorded on the trial when it is judged; the report reads that
    assert judged["peak_phase"] == "validation"
    row = TrialRow(
        number=3, state="complete", params={}, changed={}, outcome="ok", memory_note=judged["memory_note"]
    )
    lines = phase_lines([row])
    assert lines == [
        "Trial 3: peak set by validation (training 32.00, validation 33.00, save 33.00 GiB reserved); "
        "trained on latent bucket 13x16x28 (frames x height x width, the largest of 2)."
    ]
    nothing = memory_note(tmp_path / "nothing-here")
    assert nothing == {}
    assert phase_lines([TrialRow(number=3, state="complete", params={}, changed={}, outcome="ok")]) == []
