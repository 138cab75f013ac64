"""autotune's trial-side hook for PyTorch trainers we cannot change.

Python imports ``sitecustomize`` at start-up from the first ``sys.path`` entry that has one, so
putting this folder first on ``PYTHONPATH`` runs it inside the trainer. With ``AUTOTUNE_HOOK_FILE``
set, it waits (without importing torch itself) until the trainer's ``import torch`` has finished,
then registers torch's global optimizer step post-hook and appends JSON lines to that file:

    {"event": "step", "step": n, "t": <time.time()>, "step_time_s": <since the previous optimizer
     step, or since torch was imported>, "max_memory_reserved_gb": x|null,
     "max_memory_allocated_gb": y|null, "loss": <the float of the last 0-dim tensor backward() was
     called on since the previous step; a non-finite one wins>|null, "samples": <what the data
     loaders yielded since the previous step>|null, "counted": <the emulated card counted this
     step>, "pid": p}
    {"event": "backward", "backward": n, "t": ..., "step_time_s": <since the previous backward(),
     or since torch was imported>, same memory fields, "loss": <the scalar this backward() was
     called on>|null, "samples": <yielded since the previous backward()>|null, "counted": ...,
     "pid": p}: only while no optimizer step has happened in the process (a script that updates
     its weights by hand, ``p.data.add_(p.grad, alpha=-lr)``, is timed at its backward() calls; one
     with an optimizer writes at most its first accumulation's backwards)
    {"event": "card", "mode": "counted"|"capped"|"none", "vram_gb": N, "note": "...", "pid": p}
    {"event": "exit", "steps": n, "t": ..., same memory fields, "loss": ..., "pid": p,
     "exception": "..."|null}

- Step time: on CUDA, ``torch.cuda.synchronize()`` before reading the clock, so a step's queued
  kernels are inside its own time.
- Memory: CUDA's ``max_memory_reserved``/``max_memory_allocated``; on CPU with an emulated card, the
  card's counted peak (both fields); else null.
- Loss: ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped to keep the scalar
  it is called on; it is read at the step (after the synchronize: no extra stall).
- Backward events: a script that steps no ``torch.optim`` optimizer (it updates its weights by hand)
  leaves no step line; until the process's first optimizer step, each ``backward()`` call writes
  one (before it runs: the interval is one whole iteration, its forward included). The emulated
  card stops counting only at optimizer steps, so such a script's iterations are all counted.
- Samples: every ``DataLoader`` iterator's batch is measured as it is yielded (the leading dimension
  of its first tensor, else the length of a list batch), so a partial batch counts as partial and
  micro-batches of gradient accumulation add up.
- ``AUTOTUNE_EMULATED_VRAM_GB=N``: with no GPU, the emulated card (``autotune_emulated_card``, the
  reference trainer's counter) counts the tensor storage a GPU run would hold on the device
  (``EmulatedCard.count_from_first_use``: nothing before the first module forward or optimizer
  step, then the modules that run, their inputs and what the steps create) and raises
  torch's ``OutOfMemoryError`` past N GiB, for the first ``AUTOTUNE_EMULATED_COUNT_STEPS`` optimizer
  steps (default 3, as the reference trainer; 0: every step; the counter costs time on every op, so
  steps it counted are marked). With a GPU larger than N, the process is capped at N with
  ``torch.cuda.set_per_process_memory_fraction`` when CUDA initialises.

With ``AUTOTUNE_HOOK_KEY`` set (autotune's runner sets a fresh one per trial), each line is
``<hex HMAC-SHA256 of the JSON under that key> <JSON>``: the runner keeps only lines that carry a
valid MAC, so records the trainer's own code writes into the file are set aside, not believed.

The exit line is written at interpreter exit, after an uncaught exception too (named in
``exception``). Every part is guarded: if anything in the hook fails, that part switches itself off
and the trainer runs untouched. Any other ``sitecustomize`` later on the path is run afterwards, as
if this one were not there. Set ``AUTOTUNE_HOOK_DEBUG=1`` to see the hook's own failures on stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys

GIB = 1024**3
DEFAULT_COUNT_STEPS = 3


def _debug(message: str) -> None:
    if os.environ.get("AUTOTUNE_HOOK_DEBUG"):
        with contextlib.suppress(Exception):
            sys.stderr.write(f"autotune-hook: {message}\n")


def _batch_size(batch, torch, depth=0):
    """Samples in one yielded batch: the first tensor's leading dimension, else a list's length."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if depth > 4:
        return None
    from collections.abc import Mapping

    items = list(batch.values()) if isinstance(batch, Mapping) else batch
    if not isinstance(items, (list, tuple)):
        return None
    for item in items:
        if isinstance(item, (torch.Tensor, list, tuple, Mapping)):
            found = _batch_size(item, torch, depth + 1)
            if found is not None:
                return found
    if isinstance(batch, (list, tuple)) and batch:
        return len(batch)
    return None


def _non_finite(value: float) -> bool:
    return value != value or value in (float("inf"), float("-inf"))


class _Recorder:
    """Writes the step, card and exit events; turns itself off at the first failure."""

    def __init__(self, path: str, torch) -> None:
        import time

        self.path = path
        self.torch = torch
        self.time = time
        self.steps = 0
        self.last = time.perf_counter()
        self.last_backward = self.last  # the clock of the backward events (a step's is its own)
        self.exception: str | None = None
        self.enabled = True
        self.pending_losses: list = []  # detached 0-dim tensors, read at the step
        self.samples = 0
        self.loader_seen = False
        self.backwards = 0  # backward() calls seen before the first optimizer step
        self.backward_samples = 0  # self.samples at the previous backward event
        self.bad_loss = None  # the first non-finite loss a backward event read, kept for the step
        self.card = None  # the emulated card on CPU, while it counts
        self.card_peak = None  # its peak once it stopped counting
        self.card_undo = None  # removes the card's module and optimizer hooks
        self.count_steps = 0
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the process's life
        key = os.environ.get("AUTOTUNE_HOOK_KEY", "")
        self.key = key.encode("ascii", "replace") if key else None

    # -- what a step reads ----------------------------------------------------------------------
    def _cuda_in_use(self) -> bool:
        cuda = getattr(self.torch, "cuda", None)
        return bool(cuda is not None and cuda.is_available() and cuda.is_initialized())

    def _memory(self) -> dict[str, float | None]:
        fields: dict[str, float | None] = {"max_memory_reserved_gb": None, "max_memory_allocated_gb": None}
        if self._cuda_in_use():
            fields["max_memory_reserved_gb"] = self.torch.cuda.max_memory_reserved() / GIB
            fields["max_memory_allocated_gb"] = self.torch.cuda.max_memory_allocated() / GIB
        else:
            card = self.card
            peak = (card.peak if card.counting else None) if card is not None else self.card_peak
            if peak is not None:
                fields["max_memory_reserved_gb"] = fields["max_memory_allocated_gb"] = peak / GIB
        return fields

    def _loss(self) -> float | None:
        values = []
        for tensor in self.pending_losses:
            with contextlib.suppress(Exception):
                values.append(float(tensor))
        self.pending_losses = []
        if not values:
            return None
        bad = [v for v in values if _non_finite(v)]
        return bad[0] if bad else values[-1]

    def _elapsed(self, since: float) -> float:
        """Seconds since ``since``, once the GPU's queued work is done (a CUDA synchronize)."""
        if self._cuda_in_use():
            self.torch.cuda.synchronize()
        return self.time.perf_counter() - since

    def _event(self, kind: str, number: int, seconds: float, loss: float | None, samples: int) -> dict:
        """A timed line (``step`` or ``backward``): its number, time, memory, loss, samples."""
        record: dict[str, object] = {
            "event": kind,
            kind: number,
            "t": self.time.time(),
            "step_time_s": seconds,
        }
        record.update(self._memory())
        record["loss"] = loss
        record["samples"] = samples if self.loader_seen else None
        record["counted"] = self.card is not None
        record["pid"] = os.getpid()
        return record

    def _write(self, record: dict[str, object]) -> None:
        import json

        body = json.dumps(record)  # NaN/Infinity as JSON's extension: json.loads reads them
        if self.key is not None:
            import hashlib
            import hmac

            body = hmac.new(self.key, body.encode("utf-8"), hashlib.sha256).hexdigest() + " " + body
        self.file.write(body + "\n")
        self.file.flush()

    # -- the hooks ------------------------------------------------------------------------------
    def on_step(self, optimizer: object, args: object, kwargs: object) -> None:
        if not self.enabled:
            return
        try:
            seconds = self._elapsed(self.last)
            self.steps += 1
            record = self._event("step", self.steps, seconds, self._loss(), self.samples)
            self.samples = 0
            self._write(record)
            if self.card is not None and self.count_steps and self.steps >= self.count_steps:
                self._stop_counting()
            self.last = self.time.perf_counter()  # the counter's bookkeeping is not the next step's
        except Exception as exc:
            self.enabled = False
            _debug(f"step hook disabled: {exc!r}")

    def on_backward(self, tensors: object) -> None:
        if not self.enabled:
            return
        loss = tensors.detach() if isinstance(tensors, self.torch.Tensor) and tensors.dim() == 0 else None
        if loss is not None:
            self.pending_losses.append(loss)
        if self.steps == 0:  # no optimizer has stepped: this backward() is what can be timed
            try:
                self._backward_event(loss)
            except Exception as exc:
                self.enabled = False
                _debug(f"backward hook disabled: {exc!r}")

    def _backward_event(self, loss) -> None:
        """One ``backward`` line: the time since the previous backward() (one whole iteration of a
        script that updates its weights by hand), the memory, this call's loss."""
        seconds = self._elapsed(self.last_backward)
        self.backwards += 1
        value = float(loss) if loss is not None else None
        if value is not None and _non_finite(value):
            self.bad_loss = self.bad_loss if self.bad_loss is not None else loss
        # Read now: keep only what the first step's loss needs (a non-finite one wins, else the last).
        self.pending_losses = [t for t in (self.bad_loss, loss) if t is not None]
        record = self._event("backward", self.backwards, seconds, value, self.samples - self.backward_samples)
        self.backward_samples = self.samples
        self._write(record)
        self.last_backward = self.time.perf_counter()

    def on_batch(self, batch: object) -> None:
        if not self.enabled:
            return
        size = _batch_size(batch, self.torch)
        if size is not None:
            self.loader_seen = True
            self.samples += size

    def on_card(self, mode: str, vram_gb: float, note: str) -> None:
        with contextlib.suppress(Exception):
            self._write({"event": "card", "mode": mode, "vram_gb": vram_gb, "note": note, "pid": os.getpid()})

    def _stop_counting(self) -> None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        card = self.card
        if card is not None and self.card_undo is not None:
            self.card_undo()
            self.card_undo = None
        if card is not None and _get_current_dispatch_mode() is card:  # never pop the script's own mode
            card.__exit__(None, None, None)
            self.card_peak = card.peak
            self.card = None

    def on_exit(self) -> None:
        if not self.enabled:
            return
        try:
            record: dict[str, object] = {"event": "exit", "steps": self.steps, "t": self.time.time()}
            record.update(self._memory())
            record["loss"] = self._loss()
            record["pid"] = os.getpid()
            record["exception"] = self.exception
            self._write(record)
            self.file.close()
        except Exception as exc:
            _debug(f"exit hook failed: {exc!r}")

    def on_exception(self, kind: type[BaseException], value: BaseException) -> None:
        with contextlib.suppress(Exception):
            self.exception = f"{kind.__module__}.{kind.__qualname__}: {value}"[:500]


# --- installing, once torch is imported --------------------------------------------------------


def _wrap_backward(torch, recorder: _Recorder) -> None:
    """``Tensor.backward`` calls ``torch.autograd.backward``: one wrapper sees both."""
    import functools

    original = torch.autograd.backward

    @functools.wraps(original)
    def backward(tensors, *args, **kwargs):
        try:
            recorder.on_backward(tensors)
        except Exception as exc:
            _debug(f"loss not read: {exc!r}")
        return original(tensors, *args, **kwargs)

    torch.autograd.backward = backward


def _wrap_loaders(torch, recorder: _Recorder) -> None:
    """Every DataLoader iterator (single- and multi-process) yields through ``_BaseDataLoaderIter.__next__``."""
    import functools

    from torch.utils.data import dataloader

    base = dataloader._BaseDataLoaderIter
    original = base.__next__

    @functools.wraps(original)
    def __next__(self):
        batch = original(self)
        try:
            recorder.on_batch(batch)
        except Exception as exc:
            _debug(f"batch not counted: {exc!r}")
        return batch

    base.__next__ = __next__  # type: ignore[method-assign]


def _emulate(torch, recorder: _Recorder, vram_gb: float) -> None:
    """The ``vram_gb`` card: counted on CPU, or a cap on a larger GPU when CUDA initialises."""
    if torch.cuda.is_available():

        def cap() -> None:
            try:
                count = torch.cuda.device_count()
                rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
                device = rank if 0 <= rank < count else 0
                total = torch.cuda.get_device_properties(device).total_memory
                fraction = vram_gb * GIB / total
                if fraction >= 1.0:
                    recorder.on_card("none", vram_gb, f"not capped: the GPU has {total / GIB:.1f} GiB")
                    return
                previous = torch.cuda.current_device()
                torch.cuda.set_per_process_memory_fraction(fraction, device)
                torch._C._cuda_setDevice(previous)  # the allocator's call switched devices
                recorder.on_card(
                    "capped",
                    vram_gb,
                    f"set_per_process_memory_fraction({fraction:.4f}) of {total / GIB:.1f} GiB",
                )
            except Exception as exc:
                _debug(f"card not capped: {exc!r}")

        torch.cuda._lazy_call(cap)
        return
    import autotune_emulated_card

    count = os.environ.get("AUTOTUNE_EMULATED_COUNT_STEPS", "")
    recorder.count_steps = int(count) if count.strip() else DEFAULT_COUNT_STEPS
    card = autotune_emulated_card.EmulatedCard(
        int(vram_gb * GIB), setting="--vram-gb (AUTOTUNE_EMULATED_VRAM_GB)"
    )
    recorder.card = card
    recorder.card_undo = card.count_from_first_use()
    steps = "every step" if not recorder.count_steps else f"the first {recorder.count_steps} steps"
    recorder.on_card(
        "counted",
        vram_gb,
        f"device-resident tensor storage counted on CPU for {steps}: from the first module forward or "
        "optimizer step, the modules that run and what the steps create; host-held data left out",
    )


def _on_torch(torch) -> None:
    """Install the recorder once ``import torch`` has finished."""
    path = os.environ.get("AUTOTUNE_HOOK_FILE")
    if not path:
        return
    try:
        import atexit
        import importlib

        optimizer_module = importlib.import_module("torch.optim.optimizer")  # torch may load it lazily
        recorder = _Recorder(path, torch)
        optimizer_module.register_optimizer_step_post_hook(recorder.on_step)
        atexit.register(recorder.on_exit)
        previous = sys.excepthook

        def excepthook(kind, value, tb):
            recorder.on_exception(kind, value)
            previous(kind, value, tb)

        sys.excepthook = excepthook
    except Exception as exc:
        _debug(f"not installed: {exc!r}")
        return
    for part in (_wrap_backward, _wrap_loaders):
        try:
            part(torch, recorder)
        except Exception as exc:
            _debug(f"{part.__name__} not installed: {exc!r}")
    vram = os.environ.get("AUTOTUNE_EMULATED_VRAM_GB", "").strip()
    if vram and _multiprocessing_child():
        vram = ""  # a data-loader worker (spawn, forkserver): its tensors are host memory, not the card's
    if vram:
        try:
            _emulate(torch, recorder, float(vram))
        except Exception as exc:
            _debug(f"no emulated card: {exc!r}")


def _multiprocessing_child() -> bool:
    """Started by ``multiprocessing`` (a DataLoader worker under spawn or forkserver, which imports
    torch before ``parent_process()`` is set); training ranks are started as programs."""
    try:
        argv = [*sys.argv, *getattr(sys, "orig_argv", [])]
        if "--multiprocessing-fork" in argv or any("multiprocessing.forkserver" in a for a in argv):
            return True
        import multiprocessing

        return multiprocessing.parent_process() is not None
    except Exception:
        return False


class _TorchWatcher:
    """A one-shot import hook: lets ``torch`` load normally, then installs the recorder."""

    target = "torch"

    def find_spec(self, fullname, path, target=None):
        if fullname != self.target:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        try:
            spec = None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if find is not None:
                    spec = find(fullname, path, target)
                    if spec is not None:
                        break
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            loader = spec.loader
            original = loader.exec_module

            def exec_module(module):
                original(module)  # the trainer's import: any error here is torch's own
                _on_torch(module)

            loader.exec_module = exec_module  # one loader object per module: only this one changes
            return spec
        except Exception as exc:
            _debug(f"import watcher failed: {exc!r}")
            return None


def _install() -> None:
    if not os.environ.get("AUTOTUNE_HOOK_FILE"):
        return
    try:
        already = sys.modules.get(_TorchWatcher.target)
        if already is not None:
            _on_torch(already)
        else:
            sys.meta_path.insert(0, _TorchWatcher())
    except Exception as exc:
        _debug(f"not installed: {exc!r}")


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path, as Python would have without this one."""
    try:
        import importlib.machinery
        import importlib.util

        here = os.path.dirname(os.path.abspath(__file__))
        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:
        # Python's own wording for a failing sitecustomize; start-up goes on.
        sys.stderr.write(
            f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n"
        )


_install()
_chain()
