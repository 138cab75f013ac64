"""Real full and read-only filesystems for fault tests, where this machine allows them.

A tiny ``tmpfs`` (root with mount rights: containers and CI runners usually are) gives
a real ``ENOSPC``; a read-only bind mount a real ``EROFS``. Without mount rights the
helpers say so and the tests fall back to emulations that still go through the same
code path: ``/dev/full`` (every write fails with ``ENOSPC``) behind a symlinked log
file, and ``chmod`` for read-only (which does not stop root, hence the mount first).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path


def _mount(*args: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    proc = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    return proc.returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


@contextlib.contextmanager
def small_tmpfs(path: Path, size_kb: int) -> Iterator[bool]:
    """Mount a ``size_kb`` tmpfs at ``path`` (created); yields False (nothing mounted) when not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = _mount("-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path))
    try:
        yield mounted
    finally:
        if mounted:
            _umount(path)


def grow_tmpfs(path: Path, size_kb: int) -> bool:
    return _mount("-o", f"remount,size={size_kb}k", str(path))


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[str]:
    """Make the existing folder ``path`` read-only: a read-only bind mount onto itself where
    allowed (``"mount"``), else ``chmod a-w`` (``"chmod"``; root ignores it, so only when not root),
    else ``"none"``."""
    if _mount("--bind", str(path), str(path)):
        if _mount("-o", "remount,bind,ro", str(path)):
            try:
                yield "mount"
            finally:
                _umount(path)
            return
        _umount(path)
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555)
        try:
            yield "chmod"
        finally:
            path.chmod(mode)
        return
    yield "none"
