"""Configs that would exhaust the orchestrator are refused up front: exit 2, file and fix named.

A "billion laughs" YAML (aliases of aliases, nine deep: 9**9 strings from 1 KB of text) and a
config of tens of MB (which stalled the sweep before trial 0) are refused when read, by every
reader: the YAML of ltx2/reference/ai-toolkit/sana/musubi and the TOML of diffusion-pipe/musubi.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.config.tomledit import TomlConfig, load_toml_data
from autotune.config.yamlconf import read_config_text
from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigError

MAX_CONFIG_BYTES = 1024 * 1024  # the bound the README states


def laughs(depth: int = 9, key: str = "lol") -> str:
    """Nine lists of nine aliases of the list before: 9**depth values, 1 KB of text."""
    lines = [f'{key}0: &{key}0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, depth):
        refs = ", ".join([f"*{key}{i - 1}"] * 9)
        lines.append(f"{key}{i}: &{key}{i} [{refs}]")
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_at_the_line_that_blows_up() -> None:
    with pytest.raises(ConfigError) as err:
        load_yaml(laughs(), "bomb.yaml")
    msg = str(err.value)
    assert msg.startswith("bomb.yaml:")
    assert "aliases" in msg and "billion laughs" in msg and "100,000" in msg


def test_a_few_aliases_still_read_as_written() -> None:
    text = "base: &b {lr: 0.0001, steps: 10}\nfirst: *b\nsecond: *b\nmany: [*b, *b, *b, *b]\n"
    data = load_yaml(text)
    assert data["second"] == {"lr": 1e-4, "steps": 10} and len(data["many"]) == 4
    assert load_yaml(laughs(depth=4))["lol3"][0][0][0][0] == "lol"  # 9**4 = 6561 values: fine


def test_an_oversized_config_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "huge.yaml"
    with big.open("wb") as f:  # sparse: 50 MB on paper, nothing on disk, nothing read
        f.truncate(50 * 1024 * 1024)
    with pytest.raises(ConfigError) as err:
        read_config_text(big)
    assert str(big) in str(err.value) and "50.0 MB" in str(err.value) and "few KB" in str(err.value)


def test_a_config_from_a_pipe_is_read_only_up_to_the_bound(tmp_path: Path) -> None:
    fifo = tmp_path / "endless.yaml"
    os.mkfifo(fifo)
    pid = os.fork()
    if pid == 0:  # the writer: more than the bound, then it is killed with the pipe
        try:
            with fifo.open("wb") as w:
                w.write(b"# x\n" * (MAX_CONFIG_BYTES // 2))
        finally:
            os._exit(0)
    try:
        with pytest.raises(ConfigError, match=r"over 1\.0 MB"):
            read_config_text(fifo)
    finally:
        os.waitpid(pid, 0)


def test_toml_past_the_bound_is_refused() -> None:
    text = 'x = "' + "a" * (MAX_CONFIG_BYTES + 10) + '"\n'
    with pytest.raises(ConfigError, match="more than a config may be"):
        load_toml_data(text, "big.toml")
    with pytest.raises(ConfigError, match="more than a config may be"):
        TomlConfig(text, "big.toml")


@pytest.fixture
def bombs(tmp_path: Path) -> Path:
    (tmp_path / "laughs.yaml").write_text("optimization:\n  steps: 10\n" + laughs(key="x"))
    (tmp_path / "nested.yaml").write_text(
        "optimization:\n  steps: 10\nvalidation:\n  prompts: [&p0 [a, b, c, d, e, f, g, h, i]"
        + "".join(f", &p{i} [{', '.join([f'*p{i - 1}'] * 9)}]" for i in range(1, 9))
        + "]\n"
    )
    (tmp_path / "big.yaml").write_text("optimization:\n  steps: 10\n" + "# padding\n" * 200_000)
    (tmp_path / "big.toml").write_text("[model]\n[optimizer]\n" + "# padding\n" * 200_000)
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        ("plan --trainer reference --vram-gb 48 -o {t}/o.yaml --config {t}/laughs.yaml", "laughs.yaml:"),
        ("plan --trainer reference --vram-gb 48 -o {t}/o.yaml --config {t}/nested.yaml", "nested.yaml:4:"),
        ("sweep --trainer ltx2 --workdir {t}/runs --config {t}/laughs.yaml", "billion laughs"),
        ("sweep --trainer ai-toolkit --workdir {t}/runs --config {t}/laughs.yaml", "billion laughs"),
        ("sweep --trainer ltx2 --workdir {t}/runs --config {t}/big.yaml", "big.yaml is 1.9 MB"),
        ("sweep --trainer sana --workdir {t}/runs --config {t}/big.yaml", "big.yaml is 1.9 MB"),
        ("sweep --trainer diffusion-pipe --workdir {t}/runs --config {t}/big.toml", "big.toml is 1.9 MB"),
    ],
)
def test_bombs_exit_2_naming_the_file(
    argv: str, expect: str, bombs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(argv.replace("{t}", str(bombs)).split())
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("error: ") and expect in err and "internal error" not in err, err
    assert not (bombs / "runs").exists()
