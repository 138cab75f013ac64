"""Every finished trial carries the user attrs the study promises, by outcome: a table of real
sweeps (``--cmd`` over ``tests/fakes/fake_trainer.py``, one baseline trial each, run side by side).

The promised names as the study spells them: ``outcome``, ``gradient_accumulation_steps``,
``effective_batch``, ``log_path`` on every finished trial; when measured ``step_time_s``,
``samples_per_s``, ``peak_vram_gb``, ``trainer_peak_vram_gb`` (the trainer printed one),
``measured_peak_vram_gb`` and ``peak_phase`` (ours: the hook's or NVML's, absent here: the fake
runs no torch for the hook to watch and there is no NVML), ``fits`` (ok runs), the step time's
spread as ``step_time_spread_s`` or ``spread_unknown`` (one figure), the host peak as
``peak_host_rss_gb``, and a busy host as ``busy_host`` (absent when quiet: whether it is set is the
host's load, not the outcome's, so it is checked for its form only).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.helpers import FAKES, autotune_argv, cli_env

#: Every promised key (the study's spelling), whichever outcome.
PROMISED = frozenset(
    {
        "outcome",
        "gradient_accumulation_steps",
        "effective_batch",
        "log_path",
        "step_time_s",
        "samples_per_s",
        "peak_vram_gb",
        "trainer_peak_vram_gb",
        "measured_peak_vram_gb",
        "fits",
        "step_time_spread_s",
        "spread_unknown",
        "peak_phase",
        "peak_host_rss_gb",
        "busy_host",
    }
)
#: The outcomes whose error the fake prints on stderr (``log_path`` names that log).
LOG_OF = {"crash": "stderr.log", "oom": "stderr.log"}
ALWAYS = {"outcome", "gradient_accumulation_steps", "effective_batch", "log_path"}
MEASURED = {"step_time_s", "samples_per_s", "spread_unknown"}
PRINTED_PEAK = {"trainer_peak_vram_gb", "peak_vram_gb"}

#: outcome, the fake's arguments, extra sweep flags, the promised keys it carries (exactly).
TABLE: list[tuple[str, str, tuple[str, ...], set[str]]] = [
    ("ok", "succeed --steps 3", (), ALWAYS | MEASURED | PRINTED_PEAK | {"fits", "peak_host_rss_gb"}),
    ("oom", "oom", (), ALWAYS | {"peak_host_rss_gb"}),  # an OOM row shows no speed
    ("nan", "nan --steps 3", (), ALWAYS | MEASURED | PRINTED_PEAK | {"peak_host_rss_gb"}),
    ("crash", "crash", (), ALWAYS | MEASURED | {"peak_host_rss_gb"}),  # its one Step line, kept
    ("config_error", "config-error", (), ALWAYS | {"peak_host_rss_gb"}),
    ("host_oom", "sigkill-self", (), ALWAYS | {"peak_host_rss_gb"}),
    ("timeout", "hang", ("--trial-timeout", "2s"), ALWAYS | {"peak_host_rss_gb"}),
]  # fmt: skip


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """outcome -> the user attrs of its sweep's one trial (the sweeps run at once)."""
    root = tmp_path_factory.mktemp("promised")
    fake = shlex.quote(str(FAKES / "fake_trainer.py"))
    procs = {}
    for name, args, extra, _ in TABLE:
        argv = [
            *autotune_argv("sweep"), "--workdir", str(root / name), "--study", "s",
            "--cmd", f"{shlex.quote(sys.executable)} {fake} {args}", "--vram-gb", "16", "--steps", "3",
            "--max-batch-size", "1", *(extra or ("--trial-timeout", "60s")),
        ]  # fmt: skip
        procs[name] = subprocess.Popen(
            argv, cwd=root, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    for proc in procs.values():
        proc.wait(timeout=240)
    out: dict[str, dict[str, object]] = {}
    for name in procs:
        study = optuna.load_study(study_name="s", storage=f"sqlite:///{root / name / 'studies.db'}")
        (trial,) = study.trials
        out[name] = dict(trial.user_attrs)
    return out


@pytest.mark.process
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("outcome", "keys"), [(t[0], t[3]) for t in TABLE], ids=[t[0] for t in TABLE])
def test_a_finished_trial_carries_exactly_the_promised_keys(
    finished: dict[str, dict[str, object]], outcome: str, keys: set[str]
) -> None:
    attrs = finished[outcome]
    assert attrs["outcome"] == outcome, attrs.get("reason")
    # A busy host is the machine's, not the outcome's: named when it was (these sweeps run at once).
    assert {k for k in PROMISED if k in attrs} - {"busy_host"} == keys
    assert "busy_host" not in attrs or (isinstance(attrs["busy_host"], str) and attrs["busy_host"])
    # The log holding the line the reason quotes: the fake prints its traceback and OOM on stderr.
    assert Path(str(attrs["log_path"])).name == LOG_OF.get(outcome, "stdout.log")
    assert attrs["effective_batch"] == attrs["gradient_accumulation_steps"]  # batch 1, one copy
    if "fits" in attrs:
        assert isinstance(attrs["fits"], bool)
