"""A musubi-tuner user's setup for tests: the launch script docs/wan.md shows, a dataset TOML with
comments, and latent caches named as the real cache scripts name them (empty files: the fake
reads only their names)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import FAKES

FAKE_MUSUBI = FAKES / "musubi-tuner"

DATASET_TOML = """\
# general configurations (my notes)
[general]
resolution = [832, 480]
caption_extension = ".txt"
batch_size = 1
enable_bucket = true
bucket_no_upscale = false

[[datasets]]
video_directory = "/data/videos"
cache_directory = "{cache}"  # recommended to set cache directory
target_frames = [1, 25, 45]
frame_extraction = "head"

[[datasets]]
image_directory = "/data/images"
cache_directory = "{images}"
num_repeats = 2 # images twice
"""

#: docs/wan.md:170-179 @ 30c658c, with our paths.
LAUNCH = """\
#!/usr/bin/env bash
# Wan 14B LoRA, my settings
cd {trainer} && accelerate launch --num_cpu_threads_per_process 1 --mixed_precision bf16 src/musubi_tuner/wan_train_network.py \\
    --task {task} \\
    --dit {dit} \\
    --dataset_config {dataset} --sdpa --mixed_precision bf16 --fp8_base \\
    --optimizer_type adamw8bit --learning_rate 2e-4 --gradient_checkpointing \\
    --max_data_loader_n_workers 2 --persistent_data_loader_workers \\
    --network_module networks.lora_wan --network_dim 32 \\
    --timestep_sampling shift --discrete_flow_shift 3.0 \\
    --max_train_epochs 16 --save_every_n_epochs 1 --seed 42 \\
    --sample_prompts {prompts} --sample_every_n_epochs 4 --sample_at_first \\
    --output_dir {out} --output_name my-lora{extra}
"""

#: Video clips: (item, original W x H, frame counts cached), images: (item, W x H).
CLIPS = [("walk", (832, 480), (1, 25, 45)), ("run", (832, 480), (1, 25)), ("tall", (480, 832), (1, 25))]
IMAGES = [("cat", (1024, 1024)), ("dog", (768, 1024))]


def make_caches(root: Path) -> tuple[Path, Path]:
    """Latent and text-encoder caches as musubi-tuner names them
    (dataset/image_video_dataset.py:166,171,776 @ 30c658c)."""
    videos, images = root / "cache_videos", root / "cache_images"
    videos.mkdir(parents=True, exist_ok=True)
    images.mkdir(parents=True, exist_ok=True)
    for item, (w, h), frames in CLIPS:
        for f in frames:
            (videos / f"{item}_00000-{f:03d}_{w:04d}x{h:04d}_wan.safetensors").write_bytes(b"latents")
        (videos / f"{item}_wan_te.safetensors").write_bytes(b"te")
    for item, (w, h) in IMAGES:
        (images / f"{item}_{w:04d}x{h:04d}_wan.safetensors").write_bytes(b"latents")
        (images / f"{item}_wan_te.safetensors").write_bytes(b"te")
    return videos, images


def make_setup(root: Path, *, task: str = "t2v-14B", trainer: Path = FAKE_MUSUBI, extra: str = "") -> Path:
    """The launch script (returned), its dataset TOML, caches, DiT file and prompts under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    videos, images = make_caches(root)
    dataset = root / "dataset.toml"
    dataset.write_text(DATASET_TOML.format(cache=videos, images=images))
    (root / "dit.safetensors").write_bytes(b"weights")
    (root / "prompts.txt").write_text("a cat walks\n")
    script = root / "train.sh"
    script.write_text(
        LAUNCH.format(
            trainer=trainer,
            task=task,
            dit=root / "dit.safetensors",
            dataset=dataset,
            prompts=root / "prompts.txt",
            out=root / "output",
            extra=f" {extra}" if extra else "",
        )
    )
    return script
