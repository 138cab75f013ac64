"""The CLI's shared behaviour: exit codes and error lines."""

from __future__ import annotations

import pytest

from autotune.cli import main


def test_unknown_flag_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--no-such-flag"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--no-such-flag" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("value", ["abc", "-3", "0", "nan"])
def test_bad_vram_gb_is_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--vram-gb", value]) == 2
    assert "--vram-gb" in capsys.readouterr().err
