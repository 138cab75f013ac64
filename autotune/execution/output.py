"""What autotune keeps of a trial's output while it streams: each pipe copied to its log, a
bounded tail in memory, the lines that decide the outcome, and when an OOM was first printed."""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from autotune.core.outcome import ANY_OOM_SOURCE, FAILURE_LINE_SOURCE, NOTABLE_KEYWORDS, NOTABLE_SOURCE

TAIL_BYTES = 256 * 1024  # kept in memory for classification
NOTABLE_LINES = 40  # outcome-deciding lines kept even when they scroll out of the tail
READ_CHUNK = 64 * 1024  # one pipe buffer
_ANY_OOM = re.compile(ANY_OOM_SOURCE.encode(), re.M)
_FAILURE_LINE = re.compile(FAILURE_LINE_SOURCE.encode(), re.M)
_NOTABLE = re.compile(NOTABLE_SOURCE.encode(), re.M)


class Stream:
    """One of the trial's pipes and the log file it is copied into."""

    def __init__(self, pipe: IO[bytes], log: IO[bytes], log_path: Path) -> None:
        self.log_path = log_path
        self.fd = pipe.fileno()
        self.pipe = pipe
        self.log = log
        self.pending = b""  # an incomplete last line, scanned once its end arrives
        self.open = True

    def pump(self, output: TrialOutput) -> float | None:
        """Read what the pipe has: when it arrived, or None at end of stream."""
        try:
            data = os.read(self.fd, READ_CHUNK)
        except OSError:
            data = b""
        if not data:
            self.open = False
            if self.pending:
                output.scan(self.pending, now=time.monotonic())
                self.pending = b""
            return None
        now = time.monotonic()
        try:
            view = memoryview(data)
            while view:  # a raw file may take part of a block
                written = self.log.write(view)
                if not written:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
        except OSError as exc:  # disk full or read-only: name the file; run_trial ends the trial
            exc.filename = exc.filename or str(self.log_path)
            raise
        output.keep(data)
        block = self.pending + data
        cut = block.rfind(b"\n") + 1
        if cut == 0 and len(block) < READ_CHUNK:
            self.pending = block
            return now
        if cut == 0:  # a very long line without newline: scan it as it is
            cut = len(block)
        self.pending = block[cut:]
        output.scan(block[:cut], now=now)
        return now


class TrialOutput:
    """What autotune keeps of a trial's output: a bounded tail, the lines that decide its
    outcome (kept even when they scroll out of the tail) and when an OOM was first printed."""

    def __init__(self, on_output: Callable[[str], None] | None) -> None:
        self.on_output = on_output
        self.tail = bytearray()
        self.total_bytes = 0
        self.notable: list[bytes] = []
        self.oom_at: float | None = None

    def keep(self, data: bytes) -> None:
        """Add what the pipe gave to the tail (trimmed back to ``TAIL_BYTES`` once it doubles)."""
        self.total_bytes += len(data)
        self.tail += data
        if len(self.tail) > 2 * TAIL_BYTES:
            del self.tail[:-TAIL_BYTES]

    def scan(self, block: bytes, *, now: float) -> None:
        """Hand whole lines to ``on_output``, keep the notable ones, note the first OOM at ``now``."""
        if self.on_output is not None:
            for text in block.decode("utf-8", errors="replace").splitlines():
                self.on_output(text)
        if not any(k in block for k in NOTABLE_KEYWORDS):
            return
        for m in _NOTABLE.finditer(block):
            start = block.rfind(b"\n", 0, m.start()) + 1
            end = block.find(b"\n", m.end())
            line = block[start : end if end != -1 else len(block)][:1000]
            if len(self.notable) < NOTABLE_LINES and line not in self.notable:
                self.notable.append(line)
        if self.oom_at is None and any(  # only a failure's OOM line arms the OOM kill
            _FAILURE_LINE.match(block, block.rfind(b"\n", 0, m.start()) + 1) for m in _ANY_OOM.finditer(block)
        ):
            self.oom_at = now

    def tail_text(self) -> str:
        """The tail as text; when output was left out, the notable lines it lost come first."""
        tail = bytes(self.tail[-TAIL_BYTES:])
        cut = len(self.tail) > TAIL_BYTES or self.total_bytes > len(self.tail)
        text = tail.decode("utf-8", errors="replace")
        if not cut:
            return text
        text = text.split("\n", 1)[-1]  # drop a partial first line
        kept = [ln.decode("utf-8", errors="replace") for ln in self.notable]
        kept = [ln for ln in kept if ln not in text]
        head = "".join(f"{ln}\n" for ln in kept)
        if head:
            head = "[autotune: lines kept from earlier output]\n" + head
        return (
            f"{head}[autotune: earlier output left out; the full logs are stdout.log and stderr.log]\n{text}"
        )
