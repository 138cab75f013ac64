"""The trial-side hook's line as the hook writes it, for fakes that stand in for the hook.

Fakes with no torch for the real hook to watch write the hook's records themselves. The real
hook (``trials/hook/sitecustomize.py``, ``_HookState._write``) prefixes each JSON line with its
HMAC-SHA256 under the trial's ``AUTOTUNE_HOOK_KEY`` when the runner set one, and the runner keeps
only signed lines (``autotune/execution/hookseal.py``); so a fake that plays the hook signs too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any


def hook_text(record: dict[str, Any]) -> str:
    """One line of ``hook.jsonl`` for ``record``, signed as the hook signs it (newline included)."""
    body = json.dumps(record)
    key = os.environ.get("AUTOTUNE_HOOK_KEY", "")
    if key:
        body = hmac.new(key.encode("ascii"), body.encode("utf-8"), hashlib.sha256).hexdigest() + " " + body
    return body + "\n"
