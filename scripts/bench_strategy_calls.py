"""What one ``Strategy.next_candidate`` call costs as the history grows, measured side by side.

The sweep asks the strategy once per trial, so its cost is part of the orchestrator's overhead
per trial (docs/benchmark.md). Prints milliseconds per call at each history length and the ratio
to the shortest; exits 1 when a call with 100 observations passes ``--limit-ms`` (default 250).

    python scripts/bench_strategy_calls.py [--calls 5] [--limit-ms 250]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autotune.core.space import Space  # noqa: E402
from autotune.core.strategy import Observation, Strategy  # noqa: E402
from tests.fakes.landscape import KNOBS_YAML, generate  # noqa: E402

LENGTHS = (25, 50, 100, 200)


def ms_per_call(length: int, calls: int, seed: int = 7) -> float:
    """Median milliseconds of ``next_candidate`` over ``calls`` calls, with ``length`` observations."""
    space = Space.from_text(KNOBS_YAML, max_batch_size=32, allow_extra_savers=True)
    land = generate(seed)
    history = []
    for c in list(space)[:length]:
        r = land.simulate(c.params)
        history.append(Observation(c, r.outcome, r.samples_per_s, r.peak_vram_gb, None, r.spread))
    strat = Strategy(space, space.candidate(land.baseline), land.card_gb, land.headroom)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        strat.next_candidate(history)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5, help="calls per history length (median taken)")
    parser.add_argument(
        "--limit-ms", type=float, default=250.0, help="the most one call with 100 observations may take"
    )
    args = parser.parse_args(argv)
    figures = {n: ms_per_call(n, args.calls) for n in LENGTHS}
    print("observations | ms per call | vs 25")
    for n, ms in figures.items():
        print(f"{n:>12} | {ms:>11.1f} | {ms / figures[LENGTHS[0]]:.2f}x")
    if figures[100] > args.limit_ms:
        print(f"MISSED: {figures[100]:.1f} ms per call with 100 observations (limit {args.limit_ms:g} ms)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
