"""Editing a TOML config keeps the user's file as it was but for the values set, quoting included,
whatever tomlkit's version (0.15.2 wrote every replaced string in double quotes, 0.15.3 keeps the
replaced string's style)."""

from __future__ import annotations

import pytest

from autotune.config.tomledit import TomlConfig


@pytest.mark.parametrize(
    ("before", "value", "after"),
    [
        ("x = 'old'", "new", "x = 'new'"),  # literal stays literal
        ('x = "old"', "new", 'x = "new"'),  # basic stays basic
        ("x = 'old'", "it's", 'x = "it\'s"'),  # a literal string cannot hold a quote
        ("x = 'old'", "a\nb", 'x = "a\\nb"'),  # nor a newline
        ("x = 1", "text", 'x = "text"'),  # a number replaced by a string: basic
        ("y = 1", "text", 'y = 1\nx = "text"'),  # a new key: basic
        ("x = 'old'", 2, "x = 2"),  # not a string: as it is
    ],
)
def test_a_set_string_keeps_the_quoting_the_key_had(before: str, value: object, after: str) -> None:
    cfg = TomlConfig(before + "\n")
    cfg.set("x", value)
    assert cfg.text == after + "\n"
    assert cfg.get("x") == value
