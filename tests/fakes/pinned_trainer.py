"""The sweep tests' fake trainer (``sweep_trainer.py``), recording which card and when it ran.

Usage: the same arguments as ``sweep_trainer.py``. Appends two JSON lines per launch to
``$PINNED_FAKE_LOG``: ``{"event": "start", ...}`` and ``{"event": "end", ...}`` with the
candidate, ``CUDA_VISIBLE_DEVICES`` (the card the worker pinned), pid, parent pid (the
worker) and the time. ``$PINNED_FAKE_HANG_ONCE=PATH``: the first launch that creates PATH
(exclusively) writes its pid and its worker's there and hangs until killed, so a test can
kill the worker it runs under. ``$PINNED_FAKE_BASELINE_WAITS_FOR=PATH``: a launch
with batch size 1 (the baseline) waits until PATH exists, so a test can let other workers join
before the search begins.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sweep_trainer


def _log(event: str, argv: list[str]) -> None:
    path = os.environ.get("PINNED_FAKE_LOG")
    if not path:
        return
    record = {
        "event": event,
        "params": [argv[0], argv[1], int(argv[2]), argv[3].lower() == "true"],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "t": time.time(),
    }
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def main(argv: list[str]) -> int:
    _log("start", argv)
    gate = os.environ.get("PINNED_FAKE_BASELINE_WAITS_FOR")
    if gate and int(argv[2]) == 1:
        while not os.path.exists(gate):
            time.sleep(0.05)
    hang = os.environ.get("PINNED_FAKE_HANG_ONCE")
    if hang:
        try:
            fd = os.open(hang, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, f"{os.getpid()} {os.getppid()}\n".encode())
            os.close(fd)
            while True:
                time.sleep(0.1)
    rc = sweep_trainer.main(argv)
    _log("end", argv)
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
