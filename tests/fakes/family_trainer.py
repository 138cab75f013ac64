"""A fake trainer with a family: a child, and a grandchild in its own session (as a
DataLoader worker or a launcher's rank may be), so tests can check that ending a trial
ends them all.

Usage (through the ``command`` adapter's template)::

    python family_trainer.py {trial_dir} [HANG_ONCE_MARKER]

Writes ``family.json`` (the three pids) in the trial folder, then hangs; with a marker
path it hangs only when the marker does not exist yet (and creates it), and otherwise
finishes at once with a measurement in ``$AUTOTUNE_METRICS_FILE``. Stdlib only.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def main(argv: list[str]) -> int:
    trial_dir = Path(argv[0])
    marker = Path(argv[1]) if len(argv) > 1 else None
    if marker is not None and marker.exists():
        out = os.environ.get("AUTOTUNE_METRICS_FILE")
        if out:
            Path(out).write_text(json.dumps({"step_time_s": 0.1, "peak_vram_gb": 0.01, "loss": 0.5}))
        print("family_trainer: finished", flush=True)
        return 0
    if marker is not None:
        marker.write_text("hung once\n")
    child = subprocess.Popen(SLEEPER)
    grandchild = subprocess.Popen(SLEEPER, start_new_session=True)
    pids = {"trainer": os.getpid(), "child": child.pid, "grandchild": grandchild.pid}
    tmp = trial_dir / "family.json.tmp"
    tmp.write_text(json.dumps(pids))
    tmp.replace(trial_dir / "family.json")
    print(f"family_trainer: started {pids}", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
