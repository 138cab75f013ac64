from __future__ import annotations

import pytest

from autotune.core import units
from autotune.core.units import format_duration, format_gb, parse_duration
from autotune.errors import UsageError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("20m", 1200.0),
        ("8h", 28800.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "h", "-5", "0", "1h 30m", "30m1h2"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="duration"):
        parse_duration(text)


def test_format_duration() -> None:
    assert format_duration(5.25) == "5.2s"
    assert format_duration(125) == "2m05s"
    assert format_duration(3725) == "1h02m05s"


@pytest.mark.parametrize(
    ("gb", "unit", "text"),
    [
        (45.678, "GB", "45.68 GB"),
        (1.0, "GiB", "1.00 GiB"),
        (0.0275, "GB", "28.2 MiB"),
        (0.0, "GB", "0.00 GB"),
    ],
)
def test_format_gb(gb: float, unit: str, text: str) -> None:
    assert format_gb(gb, unit) == text


@pytest.mark.parametrize(
    ("step", "spread", "text"),
    [
        (0.52, 0.01, "0.520 s ± 0.010"),
        (8.0, 0.2, "8.00 s ± 0.20"),
        (1.23, None, "1.23 s"),
        (0.0042, 2.9e-05, "4.20 ms ± 0.029"),  # in seconds: ± 2.9e-05
        (0.00042, 1e-06, "0.420 ms ± 0.0010"),
        (0.5, 2.9e-09, "0.500 s ± < 0.0001"),  # never a spread of 0 for one that is not
        (0.1, 0.0, "0.100 s ± 0"),
        (0.0669, 0.0005, "0.0669 s ± 0.0005"),  # the README's demo: from 10 ms up, in seconds
    ],
)
def test_step_time_keeps_the_spread_in_the_steps_unit_without_an_exponent(
    step: float, spread: float | None, text: str
) -> None:
    assert units.step_time(step, spread) == text
