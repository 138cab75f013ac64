"""The trial-side hook's file, made trustworthy: only lines the hook signed are believed.

The hook (``trials/hook/sitecustomize.py``) runs inside the trainer's processes and appends its
records to ``hook.jsonl``. The trainer's own code could append records of its own there (a
faster step time, a smaller peak), or write the whole file. So the runner gives every trial a
fresh key (``AUTOTUNE_HOOK_KEY``, never written to the trial folder), the hook prefixes each
line with its HMAC-SHA256 under that key, and once every process of the trial has ended (so
nothing can write any more), ``seal`` keeps in ``hook.jsonl`` only the signed lines, as the plain
JSON the readers know, and sets every other line aside in ``hook.rejected.jsonl``. A trial run
without the hook has no key: any ``hook.jsonl`` in its folder was written by someone else and is
set aside whole.

What this does not stop: code in the trainer that reads ``AUTOTUNE_HOOK_KEY`` from its own
environment (the hook and the trainer share a process; the trainer's ranks need the key too) can
sign what it likes. It stops records written by code that does not go looking for the key: a
trainer's own metrics writer, a script, another program or user with access to the folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

HOOK_FILE_VAR = "AUTOTUNE_HOOK_FILE"
HOOK_KEY_VAR = "AUTOTUNE_HOOK_KEY"
HOOK_FILE_NAME = "hook.jsonl"
REJECTED_FILE_NAME = "hook.rejected.jsonl"
#: Read no more than this of a hook file (a runaway file must not eat the orchestrator's memory).
MAX_BYTES = 64 * 1024 * 1024


def new_key() -> str:
    return secrets.token_hex(32)


def sign(key: str, body: str) -> str:
    """The line the hook writes for JSON ``body`` (the hook has its own copy: it imports nothing of ours)."""
    return hmac.new(key.encode("ascii"), body.encode("utf-8"), hashlib.sha256).hexdigest() + " " + body


def seal(path: Path, key: str | None) -> int:
    """Keep in ``path`` only the lines signed with ``key`` (their JSON), set the others aside in
    ``hook.rejected.jsonl`` beside it; returns how many lines were set aside. ``key`` None: no
    hook ran, so every line is set aside. A torn last line (a process killed mid-write) is
    dropped without counting. Call it only once every process of the trial has ended."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES)
    except FileNotFoundError:
        return 0
    except OSError:
        return 0  # unreadable: the readers cannot read it either
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        lines.pop()  # torn: no newline at its end
    kept: list[bytes] = []
    rejected: list[bytes] = []
    secret = key.encode("ascii") if key else None
    for line in lines:
        mac, _, body = line.partition(b" ")
        good = (
            secret is not None
            and len(mac) == 64
            and hmac.compare_digest(hmac.new(secret, body, hashlib.sha256).hexdigest().encode(), mac)
        )
        (kept if good else rejected).append(body if good else line)
    tmp = path.with_name(path.name + ".sealing")
    try:
        tmp.write_bytes(b"".join(b + b"\n" for b in kept))
        os.replace(tmp, path)
        if rejected:
            with (path.parent / REJECTED_FILE_NAME).open("ab") as f:
                f.write(b"".join(b + b"\n" for b in rejected))
    except OSError:  # a full disk: the file cannot be trusted, so nothing of it is read
        with contextlib.suppress(OSError):
            path.unlink()
        with contextlib.suppress(OSError):
            tmp.unlink()
    return len(rejected)
