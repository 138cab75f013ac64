#!/usr/bin/env bash
# The whole test suite: lint, types, tests. pytest's "no tests ran" (exit 5) fails too.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
ruff format --check .
mypy
set +e
python -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then echo "error: no tests ran" >&2; exit 1; fi
exit "$rc"
