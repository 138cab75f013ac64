"""The emulated card: live tensor storage counted exactly on CPU, torch's own OOM past its size.

One implementation for both users: the reference trainer (``trials.reference.memory``) and the
trial-side hook (``sitecustomize`` in this folder, for any PyTorch script). The hook's folder is what
goes on ``PYTHONPATH``, so this module is top-level there: its name is autotune-prefixed so that it
cannot clash with a module of the user's script. It imports only torch (never ``autotune``).

A ``TorchDispatchMode`` sees every aten op's outputs and counts the bytes of each live tensor
*storage* once (views share a storage, so they are not counted twice), and forgets a storage when it
is freed (a weak reference on the storage, whose Python object torch keeps alive exactly as long as
the storage itself). Tensors that existed before the mode was entered (the model's weights, "moved
to the device") are adopted explicitly by the reference trainer; for a script that says nothing,
``count_from_first_use`` infers what a GPU run would hold on the device. An op whose new storages would take the live total past the
emulated card raises a real ``torch.OutOfMemoryError`` worded like the CUDA caching allocator's, so
autotune's OOM classification sees the same text. Only the process that made the card counts (a
forked data-loader worker inherits the mode, but its tensors are host memory, never the card's).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

GIB = 1024**3


def format_size(nbytes: float) -> str:
    """Bytes the way c10's ``format_size`` words them in CUDA OOM messages."""
    if nbytes <= 1024:
        return f"{int(nbytes)} bytes"
    if nbytes <= 1048576:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= 1073741824:
        return f"{nbytes / 1048576:.2f} MiB"
    return f"{nbytes / 1073741824:.2f} GiB"


def _plain_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """The plain tensors holding ``obj``'s memory, looking inside wrapper subclasses (quanto)."""
    if not isinstance(obj, torch.Tensor):
        return
    flatten = getattr(type(obj), "__tensor_flatten__", None)
    if type(obj) not in (torch.Tensor, torch.nn.Parameter) and flatten is not None:
        names, _ = obj.__tensor_flatten__()  # type: ignore[attr-defined]
        for name in names:
            yield from _plain_tensors(getattr(obj, name))
        return
    yield obj


class EmulatedCard(TorchDispatchMode):
    """Counts live tensor storage bytes exactly; raises OOM past ``capacity_bytes`` (None: no limit).

    ``setting`` names what sets the card's size, for the OOM message's fix (the reference trainer's
    config key, or the sweep's ``--vram-gb``).
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Not wrapped in torch._disable_dynamo: nothing here is compiled, and the wrapper would
        # import TorchDynamo (seconds) on the first op and add a call to every op after it.
        return False

    def __init__(self, capacity_bytes: int | None, setting: str = "reference.emulated_vram_gb") -> None:
        super().__init__()
        self.capacity = capacity_bytes
        self.setting = setting
        self.owner = os.getpid()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}  # storage data_ptr -> bytes counted
        self._refs: dict[int, weakref.ref[Any]] = {}
        self._allocates: dict[Any, bool] = {}
        #: False until ``count_from_first_use`` saw the first use: nothing on the device yet, no peak.
        self.counting = True

    # -- counting -------------------------------------------------------------------------------
    def _freed(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)
        self._refs.pop(key, None)

    def _on_free(self, key: int) -> Callable[[Any], None]:
        return lambda _ref: self._freed(key)

    def _track(self, tensor: torch.Tensor, *, enforce: bool) -> None:
        if type(tensor) is torch.Tensor or type(tensor) is torch.nn.Parameter:
            self._track_storage(tensor.untyped_storage(), enforce)
            return
        for plain in _plain_tensors(tensor):
            self._track_storage(plain.untyped_storage(), enforce)

    def _track_storage(self, storage: torch.UntypedStorage, enforce: bool) -> None:
        key = storage.data_ptr()
        if key == 0:  # empty, or meta
            return
        nbytes = storage.nbytes()
        old = self._sizes.get(key)
        if old == nbytes:
            return
        grow = nbytes - (old or 0)
        if enforce and self.capacity is not None and self.live + grow > self.capacity:
            raise self.out_of_memory(grow)
        self._sizes[key] = nbytes
        self.live += grow
        if old is None:
            self._refs[key] = weakref.ref(storage, self._on_free(key))
        if self.live > self.peak:
            self.peak = self.live

    def adopt(self, tensors: Iterable[torch.Tensor]) -> None:
        """Count tensors made before the card was in use, as ``model.to("cuda")`` would place them."""
        for tensor in tensors:
            self._track(tensor, enforce=True)

    def adopt_module(self, module: torch.nn.Module) -> None:
        self.adopt([*module.parameters(), *module.buffers()])

    def reset_peak(self) -> None:
        self.peak = self.live

    # -- what is on the device, for a script that never says (the hook) ---------------------------
    def count_from_first_use(self) -> Callable[[], None]:
        """Count only what a GPU run would hold on the device; returns the undo (removes the hooks).

        Everything is a CPU tensor here, so "on the device" is inferred from use, not from
        ``.to(device)`` (on CPU that call is the same for host and device data):

        - Nothing is counted before the first module forward or optimizer step: a dataset kept in
          CPU tensors, a model loaded on the CPU and moved later, decoders kept on the host.
        - At a module's first forward, its whole tree's parameters and buffers are adopted (the
          module computes on the device, and its children moved with it); so are the optimizer's
          parameters at its first step. A module that never runs is never counted.
        - From then on every storage an op creates is counted (activations, gradients, optimizer
          state, a batch the data loader collates or indexing copies), and a whole tensor passed
          into a module (a batch kept as it is) is adopted; a slice of a host tensor is not (on the
          GPU it would be a copy of one batch).
        """
        started = False
        self.counting = False
        seen: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        adopted: weakref.WeakSet[Any] = weakref.WeakSet()

        def start() -> None:
            nonlocal started
            if not started and os.getpid() == self.owner:
                started = True
                self.counting = True
                self.__enter__()

        def on_forward(module: torch.nn.Module, args: Any) -> None:
            if os.getpid() != self.owner:
                return
            start()
            if module not in seen:
                tree = list(module.modules())
                seen.update(tree)
                self.adopt(
                    [t for m in tree for t in (*m.parameters(recurse=False), *m.buffers(recurse=False))]
                )
            for arg in args if isinstance(args, tuple) else (args,):
                if isinstance(arg, torch.Tensor) and type(arg) is torch.Tensor:
                    storage = arg.untyped_storage()
                    if arg.nbytes == storage.nbytes():  # the whole tensor, not a window into host data
                        self._track_storage(storage, True)

        def on_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            if os.getpid() != self.owner:
                return
            start()
            if optimizer not in adopted:
                adopted.add(optimizer)
                self.adopt([p for group in optimizer.param_groups for p in group["params"]])

        import torch.optim.optimizer as optim

        handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(on_forward),
            optim.register_optimizer_step_pre_hook(on_step),
        ]

        def undo() -> None:
            for handle in handles:
                handle.remove()

        return undo

    # -- the emulated allocator's failure ---------------------------------------------------------
    def out_of_memory(self, nbytes: int) -> torch.OutOfMemoryError:
        assert self.capacity is not None
        free = max(self.capacity - self.live, 0)
        return torch.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {format_size(nbytes)}. GPU 0 has a total capacity of "
            f"{format_size(self.capacity)} of which {format_size(free)} is free. (emulated card on CPU: "
            f"{self.setting}) Of the allocated memory {format_size(self.live)} is allocated "
            f"by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. Lower the batch size, enable "
            f"gradient checkpointing, quantization or an 8-bit optimizer, or raise {self.setting}."
        )

    # -- dispatch -------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        allocates = self._allocates.get(func)
        if allocates and os.getpid() != self.owner:  # a forked worker: host memory, not the card's
            return out
        if allocates is None:
            allocates = self._allocates[func] = _may_allocate(func)
        if not allocates:
            return out
        if type(out) is torch.Tensor:
            self._track_storage(out.untyped_storage(), True)
        else:
            for leaf in tree_leaves(out):
                if isinstance(leaf, torch.Tensor):
                    self._track(leaf, enforce=True)
        return out


def _may_allocate(func: Any) -> bool:
    """False for ops that never create or grow a storage: views, and in-place ops other than resizes.

    Skipping them keeps the mode's per-op cost down (it runs on every aten op of a training step).
    """
    if getattr(func, "is_view", False):
        return False
    name = func._schema.name
    return not (name.endswith("_") and name not in _RESIZING)


_RESIZING = frozenset({"aten::resize_", "aten::resize_as_", "aten::set_"})
