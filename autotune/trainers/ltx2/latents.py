"""The shapes of LTX-2 preprocessed latents, read without torch.

``scripts/process_videos.py`` (Lightricks/LTX-2 at 400fd31, l.567-575) saves each sample with
``torch.save`` as ``{"latents": Tensor[C, F', H', W'], "num_frames": F', "height": H', "width":
W', "fps": float}``; older datasets hold a patchified ``[F'*H'*W', C]`` tensor with the same three
ints (datasets.py:283-300). ``torch.save`` writes a zip whose ``*/data.pkl`` is a pickle that
rebuilds tensors through ``torch._utils._rebuild_tensor_v2(storage, offset, size, ...)`` with the
storage as a persistent id. We unpickle it with an Unpickler that knows only those few names and
returns stand-ins (never the real classes), so no torch import and no arbitrary code: any other
global refuses the file.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Globals a torch tensor pickle names; each maps to a harmless stand-in.
_TENSOR_REBUILDERS = {"_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3"}
_MAX_PICKLE_BYTES = 1024 * 1024  # a latent file's pickle is a few hundred bytes


@dataclass(frozen=True)
class Shape:
    """A tensor's size as the pickle records it."""

    size: tuple[int, ...]


@dataclass(frozen=True, order=True)
class LatentShape:
    """One sample's video latent: latent frames x height x width (the VAE's compressed grid)."""

    frames: int
    height: int
    width: int

    @property
    def tokens(self) -> int:
        """The transformer's sequence length for this sample: what sets its memory."""
        return self.frames * self.height * self.width

    def label(self) -> str:
        return f"{self.frames}x{self.height}x{self.width}"


class _StandIn:
    """What a storage class or dtype unpickles to: nothing but a name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> _StandIn:
        return self


def _rebuild(storage: Any, offset: Any, size: Any, *rest: Any) -> Shape:
    return Shape(tuple(int(s) for s in size) if isinstance(size, (tuple, list)) else ())


def _ordered_dict(*args: Any) -> dict[Any, Any]:
    return dict(*args)


class _ShapeUnpickler(pickle.Unpickler):
    """Knows torch's tensor rebuilders, storages, dtypes and OrderedDict; refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name in _TENSOR_REBUILDERS:
            return _rebuild
        if module == "collections" and name == "OrderedDict":
            return _ordered_dict
        if module == "torch" and (name.endswith("Storage") or name in {"bfloat16", "float16", "float32"}):
            return _StandIn(name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a latent file")

    def persistent_load(self, pid: Any) -> Any:
        return _StandIn("storage")


def read_pt(path: Path) -> Any:
    """The object a ``torch.save`` file holds, tensors as ``Shape`` (raises on anything else)."""
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.endswith("data.pkl")]
        if not names:
            raise ValueError(f"{path}: no data.pkl in it (not a torch.save zip file)")
        with archive.open(names[0]) as fh:
            data = fh.read(_MAX_PICKLE_BYTES + 1)
    if len(data) > _MAX_PICKLE_BYTES:
        raise ValueError(f"{path}: its pickle is over {_MAX_PICKLE_BYTES} bytes, not a latent file")
    return _ShapeUnpickler(io.BytesIO(data)).load()


def latent_shape(path: Path) -> LatentShape | None:
    """The sample's latent frames x height x width, or None when the file is not a latent file
    we can read (an old non-zip ``torch.save``, another layout, a refused global)."""
    try:
        data = read_pt(path)
    except (OSError, ValueError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, TypeError):
        return None
    if not isinstance(data, dict):
        return None
    dims = [data.get(k) for k in ("num_frames", "height", "width")]
    if all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
        return LatentShape(int(dims[0]), int(dims[1]), int(dims[2]))  # type: ignore[arg-type]
    tensor = data.get("latents")
    if isinstance(tensor, Shape) and len(tensor.size) == 4:  # [C, F', H', W']
        return LatentShape(*tensor.size[1:])
    return None
