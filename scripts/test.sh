#!/usr/bin/env bash
# The whole test suite: lint, types, then every test, the marked kinds too (real processes, torch,
# PostgreSQL, the browser, the soak, the demo), with the 25 slowest printed. `pytest` alone runs
# only the fast tier (pyproject.toml). Extra arguments go to pytest ("-m postgres", a file, ...).
# pytest's "no tests ran" (exit 5) fails too.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
ruff format --check .
mypy
set +e
python -m pytest -q -m "" --durations=25 "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then echo "error: no tests ran" >&2; exit 1; fi
exit "$rc"
