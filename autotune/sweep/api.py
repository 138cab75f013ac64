"""The sweep's entry points, for the CLI: ``run_sweep`` (``autotune sweep``) and ``run_worker``.

Every ``autotune sweep`` is a worker of its study: it claims each candidate before it runs
it, so others may join the same study at any time (``autotune worker`` on another machine,
or one loop per card with ``--parallel``). ``strategy_factory`` is the strategy seam: the
benchmark passes its competitors there (default: ``autotune.core.strategy.Strategy``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from autotune.core.strategy import Strategy
from autotune.core.units import format_duration
from autotune.errors import StorageError, StudyMismatchError, SweepInterrupted, UsageError
from autotune.gpu.nvml import Nvml
from autotune.gpu.probe import VisibleGpu, probe
from autotune.store import optuna_private as op
from autotune.store import study as st
from autotune.store import urls
from autotune.store.storage import open_storage
from autotune.store.urls import redact_url
from autotune.sweep.options import (
    OPTIONS_ATTR,
    SweepOptions,
    SweepResult,
    options_from_attr,
)
from autotune.sweep.parallel import DEFAULT_LEASE_S, cards_for_parallel
from autotune.sweep.session import SweepSession
from autotune.sweep.setup import StrategyFactory


def visible_gpus(nvml: Nvml | bool | None) -> list[VisibleGpu]:
    """The GPUs this process may use (``CUDA_VISIBLE_DEVICES`` applied); none without a driver."""
    if nvml is False or nvml is None:
        return []
    result = probe(None if nvml is True else (lambda: nvml))
    return list(result.gpus) if result.available else []


def run_sweep(
    opts: SweepOptions,
    *,
    parallel: bool = False,
    lease_s: float = DEFAULT_LEASE_S,
    stream: TextIO | None = None,
    tty: bool | None = None,
    nvml: Nvml | bool | None = True,
    strategy_factory: StrategyFactory = Strategy,
    claims: bool = True,
) -> SweepResult:
    """``autotune sweep``: one worker, or with ``parallel`` one per card of this machine.

    ``claims=False`` runs the study alone, without claims (in-process tests); it cannot be parallel.
    """
    common: dict[str, Any] = {
        "stream": stream,
        "tty": tty,
        "nvml": nvml,
        "lease_s": lease_s,
        "claims": claims,
        "strategy_factory": strategy_factory,
    }
    if not parallel:
        return SweepSession(opts, **common).run()
    if not claims:
        raise UsageError("--parallel runs one worker per card on a claimed study; it needs claims")
    cards = cards_for_parallel(visible_gpus(nvml))
    return SweepSession(opts, pin=cards[0], siblings=cards[1:], **common).run()


def run_worker(
    study: str,
    storage: str,
    *,
    gpu: int | None = None,
    workdir: Path | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    wait_s: float = 0.0,
    stream: TextIO | None = None,
    nvml: Nvml | bool | None = True,
) -> SweepResult:
    """``autotune worker``: join a study another ``autotune sweep`` started, on one card or all."""
    st.validate_study_name(study)
    urls.check_storage_url(storage)
    stored = _wait_for_study(study, storage, wait_s, stream or sys.stderr)
    gpus = visible_gpus(nvml)
    pin: VisibleGpu | None = None
    siblings: list[VisibleGpu] = []
    if gpu is not None:
        if not 0 <= gpu < len(gpus):
            raise UsageError(
                f"--gpu {gpu}: this process sees {len(gpus)} GPU(s) (numbered 0 to {len(gpus) - 1} as CUDA "
                "numbers them, after CUDA_VISIBLE_DEVICES); pick one of those, or leave --gpu out to use all"
            )
        pin = gpus[gpu]
        os.environ["CUDA_VISIBLE_DEVICES"] = pin.uuid  # from here on this process sees only its card
    elif gpus:
        cards = cards_for_parallel(gpus)
        pin, siblings = cards[0], cards[1:]
    default_workdir = Path(str(stored.get("workdir") or urls.DEFAULT_WORKDIR))
    if workdir is None:
        workdir = default_workdir if default_workdir.is_dir() else urls.DEFAULT_WORKDIR
    opts = options_from_attr(stored[OPTIONS_ATTR], study=study, storage=storage, workdir=workdir)
    worker = SweepSession(
        opts, stream=stream, nvml=nvml, pin=pin, siblings=siblings, lease_s=lease_s, concludes=False
    )
    try:
        return worker.run()
    except StudyMismatchError as exc:
        raise StudyMismatchError(
            f"this worker cannot join study {study!r}: {exc}\nA worker runs the study's own trials, so its "
            "card (model and memory) and the trainer's config must be the study's. Run this worker on a "
            "machine with the study's card, or start a separate study for this card (autotune sweep "
            "--study OTHER_NAME ...)."
        ) from None


def _wait_for_study(name: str, url: str, wait_s: float, stream: TextIO) -> dict[str, Any]:
    """The study's user attrs once it exists and holds the sweep's options (waits up to ``wait_s``).

    Says once that it waits, and why, so a worker started before its sweep is not silent.
    """
    deadline = time.monotonic() + wait_s
    shown = redact_url(url)
    path = urls.sqlite_path(url)
    said = False
    while True:
        try:
            if path is not None and not path.exists():  # the sweep has not created it yet
                raise StorageError(f"no study database at {path} yet")
            storage = open_storage(url, create=False)
            if name in st.study_names(storage):
                attrs = storage.get_study_user_attrs(storage.get_study_id_from_name(name))
                if OPTIONS_ATTR in attrs:
                    op.engine(storage).dispose()
                    return dict(attrs)
            op.engine(storage).dispose()
            problem = f"no study {name!r} in {shown} yet"
        except StorageError as exc:
            problem = str(exc)
        if time.monotonic() >= deadline:
            raise StorageError(
                f"{problem}; start it with 'autotune sweep --study {name} --storage {shown} ...' (on any "
                "machine), or let this worker wait for it with --wait DURATION"
            )
        if not said:
            print(
                f"waiting up to {format_duration(wait_s)} for study {name!r}: {problem}",
                file=stream,
                flush=True,
            )
            said = True
        time.sleep(min(2.0, max(0.05, deadline - time.monotonic())))


__all__ = [
    "DEFAULT_LEASE_S",
    "StrategyFactory",
    "SweepInterrupted",
    "SweepOptions",
    "SweepResult",
    "run_sweep",
    "run_worker",
    "visible_gpus",
]
