"""What many test files need, in one place: the CLI's environment and runner, a polling wait, and
the finder of the real trainers' outputs in ``../shared/fixtures`` (read in place, never copied)."""

from tests.helpers.cli import FAKES, REPO, autotune_argv, cli_env, run_cli
from tests.helpers.shared import IN_CI, need_shared, shared_fixture, shared_path
from tests.helpers.wait import wait_for

__all__ = [
    "FAKES",
    "IN_CI",
    "REPO",
    "autotune_argv",
    "cli_env",
    "need_shared",
    "run_cli",
    "shared_fixture",
    "shared_path",
    "wait_for",
]
