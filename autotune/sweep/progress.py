"""The sweep's live view on stderr: which trial, which candidate, how long, the best so far.

On a terminal one status line is redrawn in place (and finished trials scroll
above it); anywhere else (a log file, CI, ``nohup``) it degrades to plain lines,
one when a trial starts and one when it ends, so an overnight log stays readable.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Callable
from typing import TextIO

from autotune.core.units import format_duration

_STEP = re.compile(r"\bStep (\d+)/(\d+)\b")
_CLEAR = "\r\x1b[K"


class Progress:
    """Thread-safe: the runner's output callback may call ``on_output`` from its own thread."""

    def __init__(
        self, stream: TextIO, *, tty: bool | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.clock = clock
        self._lock = threading.RLock()  # re-entrant: a signal handler may print while a redraw holds it
        self._status = ""  # what the status line shows now (tty only)
        self._trial: tuple[int, str, float, float | None] | None = None  # number, label, t0, estimate
        self._best = ""
        self._step = ""

    # plain lines

    def line(self, text: str) -> None:
        """A message that stays (printed above the status line on a terminal)."""
        with self._lock:
            if self.tty and self._status:
                self.stream.write(_CLEAR)
            self.stream.write(text + "\n")
            if self.tty and self._trial is not None:
                self._draw()
            self.stream.flush()

    # a trial's life

    def set_best(self, text: str) -> None:
        with self._lock:
            self._best = text

    def trial_started(self, number: int, label: str, estimate_s: float | None, *, note: str = "") -> None:
        with self._lock:
            self._trial = (number, label, self.clock(), estimate_s)
            self._step = ""
            if not self.tty:
                est = f", estimate ~{format_duration(estimate_s)}" if estimate_s else ""
                best = f"; best so far: {self._best}" if self._best else ""
                shown = f": {label}" if label else ""  # nothing swept: no dangling colon
                self.stream.write(f"trial {number} started{note}{shown}{est}{best}\n")
            else:
                self._draw()
            self.stream.flush()

    def on_output(self, line: str) -> None:
        """Fed every output line of the running trial; keeps its latest ``Step n/N``."""
        m = _STEP.search(line)
        if m:
            with self._lock:
                self._step = f"step {m.group(1)}/{m.group(2)}"

    def tick(self) -> None:
        """Redraw the status line (call a few times a second; a no-op off a terminal)."""
        if not self.tty:
            return
        with self._lock:
            if self._trial is not None:
                self._draw()
                self.stream.flush()

    def trial_finished(self, number: int, summary: str) -> None:
        with self._lock:
            if self.tty and self._status:
                self.stream.write(_CLEAR)
                self._status = ""
            elapsed = self.clock() - self._trial[2] if self._trial is not None else 0.0
            self._trial = None
            self.stream.write(f"trial {number} {summary} ({format_duration(elapsed)})\n")
            self.stream.flush()

    def close(self) -> None:
        with self._lock:
            if self.tty and self._status:
                self.stream.write(_CLEAR)
                self._status = ""
                self.stream.flush()
            self._trial = None

    def status_text(self) -> str:
        """The status line as it would be drawn now (also used by tests)."""
        if self._trial is None:
            return ""
        number, label, t0, estimate = self._trial
        elapsed = self.clock() - t0
        parts = [f"trial {number}: {label}" if label else f"trial {number}", format_duration(elapsed)]
        if estimate:
            parts[-1] += f" of ~{format_duration(estimate)}"
        if self._step:
            parts.append(self._step)
        if self._best:
            parts.append(f"best {self._best}")
        return " | ".join(parts)

    def _draw(self) -> None:
        text = self.status_text()
        width = shutil.get_terminal_size((120, 24)).columns - 1
        if len(text) > width:
            text = text[: max(0, width - 1)] + "…"
        self.stream.write(_CLEAR + text)
        self._status = text
