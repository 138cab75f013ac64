"""A fake trainer that records how it was started: its argv, and for each name in
``--check-env NAME``... whether that variable arrived (a hash, never the value itself,
so a secret cannot leak into the trial folder through this fake).

Writes ``argv-seen.json`` in its working directory (or ``--out PATH``), prints one
line, writes a measurement to ``$AUTOTUNE_METRICS_FILE`` when set, exits 0. Stdlib only: it stands for any program autotune may start.
"""

import hashlib
import json
import os
import sys
from pathlib import Path


def main() -> int:
    argv = sys.argv[1:]
    out = Path("argv-seen.json")
    checks: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--out" and i + 1 < len(argv):
            out = Path(argv[i + 1])
        if argv[i] == "--check-env" and i + 1 < len(argv):
            checks.append(argv[i + 1])
        i += 1
    env = {
        name: hashlib.sha256(os.environ[name].encode()).hexdigest() if name in os.environ else None
        for name in checks
    }
    out.write_text(json.dumps({"argv": argv, "env_sha256": env}, indent=1) + "\n", encoding="utf-8")
    print(f"argv_trainer: {len(argv)} arguments recorded in {out}", flush=True)
    metrics = os.environ.get("AUTOTUNE_METRICS_FILE")
    if metrics:  # enough for a sweep to count the trial as measured
        Path(metrics).write_text(json.dumps({"step_time_s": 0.1, "peak_vram_gb": 0.01, "loss": 0.5}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
