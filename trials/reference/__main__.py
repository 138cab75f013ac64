"""``python -m trials.reference CONFIG.yaml [--disable-progress-bars]``: the LTX-2 trainer's command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trials.reference.config import ConfigError, load_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trials.reference",
        description="Train the built-in reference video-diffusion model from an LTX-2-style YAML config.",
    )
    parser.add_argument("config", type=Path, help="the YAML config (LTX-2 keys plus a 'reference:' section)")
    parser.add_argument(
        "--disable-progress-bars",
        action="store_true",
        help="print 'Step N/M - Loss: ...' lines instead of a progress bar (as the LTX-2 trainer does)",
    )
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        # The LTX-2 trainer's wording and channel for a config it refuses (stdout, exit 1).
        print(f"Error: Invalid configuration data: {exc}", flush=True)
        return 1
    # torch is imported only once the config is known to be good: a bad config fails fast.
    from trials.reference.train import run, write_metrics

    metrics = run(cfg, progress_bars=not args.disable_progress_bars)
    write_metrics(metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
