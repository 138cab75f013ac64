#!/usr/bin/env bash
# The whole test suite: lint, types, then every test, the marked kinds too (real processes, torch,
# PostgreSQL, the browser, the soak, the demo), with the 25 slowest printed. `pytest` alone runs
# only the fast tier (pyproject.toml). Extra arguments go to one pytest run over everything
# ("-m postgres", a file, ...). pytest's "no tests ran" (exit 5) fails too.
#
# With no arguments the fast tier (in-process tests) runs on two workers (pytest-xdist), then the
# marked kinds run one at a time: they time real processes and watch the host's CPU load, which a
# second worker beside them would disturb; only those also marked "untimed" run on two workers
# (before the rest). The real tier (marker "real") runs last, and only when a trainer checkout is
# named: AUTOTUNE_LTX2_SRC, AUTOTUNE_MUSUBI_SRC, AUTOTUNE_DPIPE_SRC, AUTOTUNE_AITK_SRC.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
ruff format --check .
mypy

run() {
  set +e
  python -m pytest -q "$@"
  local rc=$?
  set -e
  if [ "$rc" = 5 ]; then echo "error: no tests ran" >&2; exit 1; fi
  if [ "$rc" != 0 ]; then exit "$rc"; fi
}

if [ "$#" -gt 0 ]; then
  run -m "" --durations=25 "$@"
else
  run -n 2 --durations=10
  marked="process or torch or postgres or browser or soak or demo"
  # Marked "untimed" (what they check depends on neither the clock nor the host's load: one script
  # or in-process torch checked for counts, bytes, losses, exits; sweeps over fakes whose step
  # times, peaks and OOMs are modelled): these may share the host, two workers at once.
  run -n 2 -m "($marked) and untimed" --durations=10
  run -m "($marked) and not untimed" --durations=25
  # The real tier: the real trainers, unmodified, from the checkouts these variables name
  # (tests/real/test_real_*.py say which commits were tested); each test skips the trainers not named.
  if [ -n "${AUTOTUNE_LTX2_SRC:-}${AUTOTUNE_MUSUBI_SRC:-}${AUTOTUNE_DPIPE_SRC:-}${AUTOTUNE_AITK_SRC:-}" ]; then
    run -m real --durations=10
  fi
fi
