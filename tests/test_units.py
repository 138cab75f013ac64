from __future__ import annotations

import pytest

from autotune.errors import UsageError
from autotune.units import format_duration, parse_duration


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
