"""The sweep's progress lines as a new user reads them: no dangling colon when nothing is swept,
figures in plain digits (never ``3.77e+03``), a script's own length said as information."""

from __future__ import annotations

import io

import pytest

from autotune.core.units import plain
from autotune.sweep.measure import summary
from autotune.sweep.progress import Progress


@pytest.mark.parametrize(
    ("x", "digits", "shown"),
    [
        (3771.4, 3, "3771"),  # was 3.77e+03
        (37714.0, 3, "37714"),
        (37.714, 3, "37.7"),
        (3.7714, 3, "3.77"),
        (0.037714, 3, "0.0377"),
        (0.0000377, 3, "0.0000"),  # at most 4 decimals
        (12345.6, 4, "12346"),
        (1.5, 4, "1.500"),
        (0.0, 3, "0"),
        (float("inf"), 3, "inf"),
    ],
)
def test_plain_figures_have_no_exponent(x: float, digits: int, shown: str) -> None:
    assert plain(x, digits) == shown


@pytest.mark.parametrize(("label", "line"), [("", "trial 0 started (baseline)\n"),
                                             ("bs=16", "trial 0 started (baseline): bs=16\n")])  # fmt: skip
def test_a_trial_with_nothing_swept_starts_without_a_dangling_colon(label: str, line: str) -> None:
    out = io.StringIO()
    p = Progress(out, tty=False)
    p.trial_started(0, label, None, note=" (baseline)")
    assert out.getvalue() == line
    assert p.status_text().startswith("trial 0 |" if not label else "trial 0: bs=16 |")


def test_a_finished_trials_line_shows_plain_digits_and_its_own_length_as_information() -> None:
    line = summary(
        {"outcome": "ok", "samples_per_s": 3771.4, "step_time_s": 0.0042, "fits": None,
         "steps_run": 14, "steps": 50}
    )  # fmt: skip
    assert line.startswith("ok: 3771 samples/s (step 4.20 ms, spread unknown)")
    assert "e+0" not in line
    assert line.endswith("; ran 14 steps (50 asked)")
    assert "not the" not in line
