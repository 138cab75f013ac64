"""One card's trial process, watched: what ``TrialExecutor`` hands a launch to.

The trial runs in a worker thread; meanwhile its pid, mark and start time are recorded on the trial
the moment the runner reports the process started (so a resume can end what a dead sweep left
running) and the progress view is kept live. Around it, the card's memory is read before and
drained after, so the next trial starts on a card the last one has left.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.core.record import TrialRecord
from autotune.execution.launch import LaunchSpec
from autotune.execution.proctree import ProcessRecord
from autotune.execution.runner import RunLimits, RunResult, run_trial
from autotune.gpu.nvml import Nvml
from autotune.sweep.progress import Progress
from autotune.sweep.scheduler import TrialHandle
from autotune.sweep.setup import Card


class CardWatch:
    """Runs and watches the trials of one card (``nvml``: its sampling and drain; ``None``: none)."""

    def __init__(self, nvml: Nvml | None, card: Card, progress: Progress, stop: threading.Event) -> None:
        self.nvml, self.card, self.progress, self.stop = nvml, card, progress, stop

    def run(
        self,
        spec: LaunchSpec,
        trial_dir: Path,
        limits: RunLimits,
        handle: TrialHandle,
        launched: Mapping[str, Any],
    ) -> tuple[RunResult | None, BaseException | None]:
        """Run the trial in a worker thread; meanwhile record its pid (with ``launched``, one write)
        and keep the progress view live. The result, or what kept it from starting."""
        from autotune.execution.monitor import ResourceMonitor

        nvml = self.nvml
        monitor = ResourceMonitor(nvml, self.card.indices) if nvml is not None and self.card.indices else None
        result: list[RunResult] = []
        error: list[BaseException] = []
        started: list[ProcessRecord] = []  # the runner's ``on_start``, from its thread

        def work() -> None:
            try:
                result.append(
                    run_trial(
                        spec,
                        trial_dir,
                        limits,
                        monitor=monitor,
                        stop=self.stop,
                        on_output=self.progress.on_output,
                        on_start=started.append,
                    )
                )
            except BaseException as exc:
                error.append(exc)
            finally:
                done.set()

        done = threading.Event()
        worker = threading.Thread(target=work, name=f"trial-{handle.trial.number}", daemon=True)
        worker.start()
        pid_recorded = False
        while not done.wait(0.05 if not pid_recorded else 0.25):  # wakes at once when the trial ends
            if not pid_recorded and started:
                record_pid(handle, started[0], launched)
                pid_recorded = True
            self.progress.tick()
        worker.join()
        return (result[0] if result else None), (error[0] if error else None)

    def memory_used(self) -> dict[int, int] | None:
        """The card's used bytes per NVML index, before a trial (``None``: nothing to drain to)."""
        nvml = self.nvml
        if nvml is None or not self.card.indices:
            return None
        from autotune.gpu.drain import used_bytes

        result: dict[int, int] = used_bytes(nvml, self.card.indices)
        return result

    def drain(self, before: dict[int, int] | None, timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) until the card is back to ``before``: the trial's memory freed."""
        nvml = self.nvml
        if before is None or nvml is None:
            return
        from autotune.gpu.drain import wait_for_drain

        wait_for_drain(nvml, self.card.indices, before, timeout_s)


def record_pid(handle: TrialHandle, process: ProcessRecord, launched: Mapping[str, Any]) -> None:
    """Store the trial's pid/pgid and mark (the runner's ``on_start``) so a resume can end it."""
    # The start time comes with the record: asking psutil here would miss a trial that already
    # ended (a fast one), and a resume needs it to tell the pid from a reused one.
    attrs = {
        **launched,
        **TrialRecord.attrs_of(pid=process.pid, pgid=process.pid, pid_start=process.started_at),
    }
    if process.mark:
        attrs.update(TrialRecord.attrs_of(process_mark=str(process.mark)))
    handle.set_attrs(attrs)
