from __future__ import annotations

import pytest

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
