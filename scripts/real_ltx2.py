"""The real LTX-2 trainer on CPU, with tiny random weights: the rig of the ``real`` test tier.

Nothing of LTX-2 is copied here and nothing is downloaded from Hugging Face. Given a checkout of
Lightricks/LTX-2 (tested at 400fd31, ltx-trainer 1.2.0), it builds under a cache folder:

- ``venv/``: a CPU-only environment for the trainer (torch pinned to 2.13.0, the trainer's runtime
  dependencies from PyPI, the checkout's ``ltx-core`` and ``ltx-trainer`` sources on its path
  through a ``.pth`` file, so the checkout itself is never written to), with two environment
  fixes for PyPI's CUDA-linked torchaudio/torchvision wheels (``fix_cpu_wheels``);
- ``models/ltx2-tiny.safetensors``: a monolithic checkpoint (transformer, text connectors, video
  and audio VAE, vocoder; its config in the safetensors metadata, as real LTX-2 checkpoints carry
  it), every module built by ltx-core's own configurators (``*.from_metadata``) from a tiny
  config, with random weights, then reloaded through the trainer's own loaders
  (``ltx_trainer.model_loader``) and refused if any parameter stayed on the meta device;
- ``models/gemma/``: a tiny Gemma 3 directory (transformers' own ``Gemma3ForConditionalGeneration``,
  a BPE tokenizer trained here on a few captions);
- ``data/``: a preprocessed dataset in the layout the trainer reads (``latents/``, ``conditions/``,
  ``audio_latents/``, the dict keys of process_videos.py:566-573, 895-915 and
  process_captions.py:337-358), in two resolution buckets; the conditions are computed as
  process_captions.py computes them (the text encoder, then the embeddings processor's feature
  extractor).

It follows the rig measured in ``shared/real-trainers/ltx2-tiny`` (build_tiny.py, build_data.py,
fix_venv.sh), which first ran the unmodified trainer this way.

Usage (any Python 3.10+; idempotent, a stamp file per stage):
    python scripts/real_ltx2.py prepare --src LTX2_CHECKOUT [--cache DIR]
prints one JSON object: ``python`` (the trainer's venv), ``model``, ``text_encoder``, ``data``,
``trainer_dir``. ``--cache`` defaults to ``$AUTOTUNE_LTX2_CACHE``, else ``~/.cache/autotune/ltx2-real``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TORCH_PIN = "torch==2.13.0"
#: ltx-trainer 1.2.0's runtime dependencies (packages/ltx-trainer/pyproject.toml, ltx-core's
#: pyproject.toml) that training and validation import. Left out: torchcodec, google-genai,
#: openai, opencv-python, pillow-heif, scenedetect (preprocessing and captioning scripts only).
DEPENDENCIES = (
    "einops",
    "numpy",
    "av",
    "transformers>=5.8.0,<5.15",
    "safetensors",
    "accelerate>=1.2.1",
    "scipy>=1.14",
    "imageio",
    "imageio-ffmpeg",
    "optimum-quanto>=0.2.6",
    "pandas",
    "peft>=0.14.0",
    "pydantic>=2.10.4",
    "rich>=13.9.4",
    "sentencepiece",
    "soundfile",
    "typer",
    "wandb>=0.27.0",
    "setuptools>=79",
    "huggingface-hub",
    "tokenizers",
    "bitsandbytes",
    "pyyaml",
    "torchvision",
)
#: PyPI has no torchaudio for torch 2.13; 2.11.1 runs as pure Python once its compiled libraries
#: are gone (torchaudio/_extension/utils.py: a missing library is "not available", a broken one
#: raises). ltx-core needs only MelSpectrogram and functional.resample, both pure Python.
TORCHAUDIO = "torchaudio==2.11.1"
STAMP_VERSION = "1"
#: Builds the models and data inside the trainer's venv.
BUILD_SCRIPT = Path(__file__).resolve().with_name("real_ltx2_build.py")


# --- the trainer's environment (runs under any Python) ---------------------------------------------


def trainer_package(src: Path) -> Path:
    package = src / "packages" / "ltx-trainer"
    if not (package / "scripts" / "train.py").is_file():
        raise SystemExit(
            f"error: {src} is not an LTX-2 checkout: {package / 'scripts' / 'train.py'} is missing; "
            "point --src (AUTOTUNE_LTX2_SRC) at a checkout of Lightricks/LTX-2"
        )
    return package


def venv_python(cache: Path) -> Path:
    return cache / "venv" / "bin" / "python"


def _run(argv: list[str], **kwargs: Any) -> None:
    print("+", " ".join(argv), file=sys.stderr, flush=True)
    subprocess.run(argv, check=True, **kwargs)


def make_venv(cache: Path, src: Path) -> Path:
    """The trainer's CPU venv under ``cache/venv`` (kept while its stamp names the same checkout)."""
    python = venv_python(cache)
    stamp = cache / "venv" / ".autotune-ready"
    want = f"{STAMP_VERSION} {src.resolve()}"
    if stamp.is_file() and stamp.read_text() == want and python.is_file():
        return python
    _run([sys.executable, "-m", "venv", "--clear", str(cache / "venv")])
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pins:
        pins.write(TORCH_PIN + "\n")  # never let pip pick another torch (a CUDA build, say)
    try:
        pip = [str(python), "-m", "pip", "install", "-q", "-c", pins.name]
        _run([*pip, TORCH_PIN])
        _run([*pip, *DEPENDENCIES])
        _run([*pip, "--no-deps", TORCHAUDIO])
    finally:
        os.unlink(pins.name)
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    fix_cpu_wheels(site)
    packages = src.resolve() / "packages"
    (site / "autotune-ltx2-src.pth").write_text(
        f"{packages / 'ltx-core' / 'src'}\n{packages / 'ltx-trainer' / 'src'}\n", encoding="utf-8"
    )
    stamp.write_text(want)
    return python


def fix_cpu_wheels(site: Path) -> None:
    """Make PyPI's torchvision/torchaudio wheels import beside the CPU torch (environment fixes,
    not changes to the trainer). Both are linked against CUDA torch (``libc10_cuda.so``):
    - torchaudio: its compiled libraries are removed, so it runs as pure Python;
    - torchvision: without its ``_C.so``, ``_meta_registrations.py`` would still call
      ``register_fake("torchvision::nms")`` for an op that does not exist and die; those two
      registrations are made conditional on the ops being there. The trainer uses only
      ``torchvision.transforms.functional``."""
    for lib in (site / "torchaudio" / "lib").glob("*.so"):
        lib.unlink()
    for name in ("_C.so", "image.so"):
        (site / "torchvision" / name).unlink(missing_ok=True)
    meta = site / "torchvision" / "_meta_registrations.py"
    text = meta.read_text(encoding="utf-8")
    fixed = re.sub(
        r'^@torch\.library\.register_fake\("torchvision::(q?nms)"\)$',
        r'@(torch.library.register_fake("torchvision::\1") if torchvision.extension._has_ops() else (lambda f: f))',
        text,
        flags=re.MULTILINE,
    )
    meta.write_text(fixed, encoding="utf-8")


def prepare(src: Path, cache: Path) -> dict[str, str]:
    """Venv, models and data under ``cache`` (each stage skipped when its stamp is there)."""
    package = trainer_package(src)
    cache.mkdir(parents=True, exist_ok=True)
    python = make_venv(cache, src)
    stamp = cache / ".built"
    if not (stamp.is_file() and stamp.read_text() == STAMP_VERSION):
        _run([str(python), str(BUILD_SCRIPT), str(cache)])
        stamp.write_text(STAMP_VERSION)
    return {
        "python": str(python),
        "model": str(cache / "models" / "ltx2-tiny.safetensors"),
        "text_encoder": str(cache / "models" / "gemma"),
        "data": str(cache / "data"),
        "trainer_dir": str(package),
    }


def default_cache() -> Path:
    env = os.environ.get("AUTOTUNE_LTX2_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "autotune" / "ltx2-real"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="venv, tiny models and data under the cache folder (idempotent)")
    p.add_argument("--src", type=Path, default=os.environ.get("AUTOTUNE_LTX2_SRC"), help="the LTX-2 checkout")
    p.add_argument(
        "--cache", type=Path, default=None, help="the cache folder (default: $AUTOTUNE_LTX2_CACHE)"
    )
    args = parser.parse_args(argv)
    if args.src is None:
        parser.error("--src (or AUTOTUNE_LTX2_SRC) must name an LTX-2 checkout")
    print(json.dumps(prepare(Path(args.src), (args.cache or default_cache()).resolve())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
