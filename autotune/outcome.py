"""How a trial ended. Every end but ``ok`` is a FAIL trial in the study."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    OK = "ok"
    OOM = "oom"  # device memory
    HOST_OOM = "host_oom"  # host RAM: SIGKILL with no traceback, or the CPU allocator
    TIMEOUT = "timeout"  # wall-clock limit
    STALLED = "stalled"  # no output for the stall limit
    NAN = "nan"  # loss went NaN or inf
    CONFIG_ERROR = "config_error"
    CRASH = "crash"  # anything else
    INTERRUPTED = "interrupted"  # Ctrl-C / SIGTERM to autotune, or orchestrator died

    def __str__(self) -> str:
        return self.value
