"""autotune's trial-side hook for PyTorch trainers we cannot change.

Python imports ``sitecustomize`` at start-up from the first ``sys.path`` entry that has one, so
putting this folder on ``PYTHONPATH`` runs it inside the trainer. With ``AUTOTUNE_HOOK_FILE`` set,
it waits (without importing torch itself) until the trainer imports ``torch.optim.optimizer``,
then registers torch's global optimizer step post-hook and appends JSON lines to that file:

    {"event": "step", "step": n, "t": <time.time()>, "step_time_s": <since the previous optimizer
     step, or since the hook was installed>, "max_memory_reserved_gb": x|null,
     "max_memory_allocated_gb": y|null, "pid": p}
    {"event": "exit", "steps": n, "t": ..., same memory fields, "pid": p, "exception": "..."|null}

The exit line is written at interpreter exit, after an uncaught exception too (named in
``exception``). Memory fields are null unless CUDA is in use. Every part is guarded: if anything
in the hook fails, it switches itself off and the trainer runs untouched. Any other
``sitecustomize`` later on the path is run afterwards, as if this one were not there.
Set ``AUTOTUNE_HOOK_DEBUG=1`` to see the hook's own failures on stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys


def _debug(message: str) -> None:
    if os.environ.get("AUTOTUNE_HOOK_DEBUG"):
        with contextlib.suppress(Exception):
            sys.stderr.write(f"autotune-hook: {message}\n")


class _Recorder:
    """Writes the step and exit events; turns itself off at the first failure."""

    def __init__(self, path: str) -> None:
        import time

        self.path = path
        self.time = time
        self.steps = 0
        self.last = time.perf_counter()
        self.exception: str | None = None
        self.enabled = True
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the process's life

    def _memory(self) -> dict[str, float | None]:
        fields: dict[str, float | None] = {"max_memory_reserved_gb": None, "max_memory_allocated_gb": None}
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_available() and cuda.is_initialized():
            fields["max_memory_reserved_gb"] = cuda.max_memory_reserved() / 1024**3
            fields["max_memory_allocated_gb"] = cuda.max_memory_allocated() / 1024**3
        return fields

    def _write(self, record: dict[str, object]) -> None:
        import json

        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def on_step(self, optimizer: object, args: object, kwargs: object) -> None:
        if not self.enabled:
            return
        try:
            now = self.time.perf_counter()
            self.steps += 1
            record: dict[str, object] = {
                "event": "step",
                "step": self.steps,
                "t": self.time.time(),
                "step_time_s": now - self.last,
            }
            record.update(self._memory())
            record["pid"] = os.getpid()
            self._write(record)
            self.last = now
        except Exception as exc:
            self.enabled = False
            _debug(f"step hook disabled: {exc!r}")

    def on_exit(self) -> None:
        if not self.enabled:
            return
        try:
            record: dict[str, object] = {"event": "exit", "steps": self.steps, "t": self.time.time()}
            record.update(self._memory())
            record["pid"] = os.getpid()
            record["exception"] = self.exception
            self._write(record)
            self.file.close()
        except Exception as exc:
            _debug(f"exit hook failed: {exc!r}")

    def on_exception(self, kind: type[BaseException], value: BaseException) -> None:
        with contextlib.suppress(Exception):
            self.exception = f"{kind.__module__}.{kind.__qualname__}: {value}"[:500]


def _register(optimizer_module: object) -> None:
    """Install the recorder once torch's optimizer module exists."""
    path = os.environ.get("AUTOTUNE_HOOK_FILE")
    if not path:
        return
    try:
        import atexit

        recorder = _Recorder(path)
        optimizer_module.register_optimizer_step_post_hook(recorder.on_step)  # type: ignore[attr-defined]
        atexit.register(recorder.on_exit)
        previous = sys.excepthook

        def excepthook(kind, value, tb):
            recorder.on_exception(kind, value)
            previous(kind, value, tb)

        sys.excepthook = excepthook
    except Exception as exc:
        _debug(f"not installed: {exc!r}")


class _OptimizerWatcher:
    """A one-shot import hook: lets ``torch.optim.optimizer`` load normally, then registers."""

    target = "torch.optim.optimizer"

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
                _register(module)

            loader.exec_module = exec_module  # one loader object per module: only this one changes
            return spec
        except Exception as exc:
            _debug(f"import watcher failed: {exc!r}")
            return None


def _install() -> None:
    if not os.environ.get("AUTOTUNE_HOOK_FILE"):
        return
    try:
        already = sys.modules.get(_OptimizerWatcher.target)
        if already is not None:
            _register(already)
        else:
            sys.meta_path.insert(0, _OptimizerWatcher())
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
