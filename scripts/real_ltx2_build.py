"""The tiny LTX-2 models and data of the ``real`` test tier, built with ltx-core's own classes.

Runs inside the trainer's venv (torch, transformers, ltx-core), started by ``scripts/real_ltx2.py
prepare`` (which says what is built, from what, and why): ``python scripts/real_ltx2_build.py CACHE``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# --- tiny dimensions ------------------------------------------------------------------------------
# Fixed by the trainer's own code, so NOT shrunk: 128 video latent channels (VideoLatentShape's
# default, used by validation), audio latents of 8 channels x 16 mel bins = 128
# (AudioLatentShape.from_duration), the VAE's 32x32x8 compression (video_dims are multiples of 32).
GEMMA_HIDDEN = 32  # = caption_channels = the connectors' inner dim (2 heads x 16)
GEMMA_LAYERS = 2
VIDEO_HEADS, VIDEO_HEAD_DIM = 2, 16
AUDIO_HEADS, AUDIO_HEAD_DIM = 2, 8  # audio heads must equal video heads
NUM_LAYERS = 2

TRANSFORMER: dict[str, Any] = {
    # the keys LTXModelConfigurator.check_config_value insists on (model_configurator.py:25-43)
    "dropout": 0.0,
    "attention_bias": True,
    "num_vector_embeds": None,
    "activation_fn": "gelu-approximate",
    "num_embeds_ada_norm": 1000,
    "use_linear_projection": False,
    "only_cross_attention": False,
    "cross_attention_norm": True,
    "double_self_attention": False,
    "upcast_attention": False,
    "standardization_norm": "rms_norm",
    "norm_elementwise_affine": False,
    "qk_norm": "rms_norm",
    "positional_embedding_type": "rope",
    "use_audio_video_cross_attention": True,
    "share_ff": False,
    "av_cross_ada_norm": True,
    "use_middle_indices_grid": True,
    "num_attention_heads": VIDEO_HEADS,
    "attention_head_dim": VIDEO_HEAD_DIM,
    "in_channels": 128,
    "out_channels": 128,
    "num_layers": NUM_LAYERS,
    "cross_attention_dim": VIDEO_HEADS * VIDEO_HEAD_DIM,
    "audio_num_attention_heads": AUDIO_HEADS,
    "audio_attention_head_dim": AUDIO_HEAD_DIM,
    "audio_in_channels": 128,
    "audio_out_channels": 128,
    "audio_cross_attention_dim": AUDIO_HEADS * AUDIO_HEAD_DIM,
    "caption_channels": GEMMA_HIDDEN,  # the 19B layout: the caption projection is in the transformer
    "connector_num_attention_heads": 2,  # Embeddings1DConnectorConfigurator
    "connector_attention_head_dim": GEMMA_HIDDEN // 2,
    "connector_num_layers": 1,
}


def _vae_blocks(compress: str) -> list[list[Any]]:
    res: list[Any] = ["res_x", {"num_layers": 1}]
    down: list[Any] = [compress, {"multiplier": 1}]
    return [res, down, res, down, res, down, res]


VAE: dict[str, Any] = {
    "_class_name": "CausalVideoAutoencoder",
    "dims": 3,
    "latent_channels": 128,
    "out_channels": 3,
    "patch_size": 4,
    "encoder_blocks": _vae_blocks("compress_all_res"),
    "decoder_blocks": _vae_blocks("compress_all"),
    "norm_layer": "pixel_norm",
    "causal_decoder": False,
    "timestep_conditioning": False,
    "spatial_padding_mode": "reflect",
    "decoder_base_channels": 8,
    "latent_log_var": "uniform",
}
AUDIO_VAE: dict[str, Any] = {
    "model": {
        "params": {
            "sampling_rate": 16000,
            "ddconfig": {
                "ch": 128,  # = the audio PerChannelStatistics size, 8 channels x 16 mel (audio_vae.py:118,319)
                "out_ch": 2,
                "in_channels": 2,
                "ch_mult": [1, 1, 1],
                "num_res_blocks": 1,
                "attn_resolutions": [],
                "resolution": 256,
                "z_channels": 8,
                "double_z": True,
                "mel_bins": 64,
                "norm_type": "pixel",
                "causality_axis": "height",
                "mid_block_add_attention": False,
            },
        }
    },
    "preprocessing": {
        "stft": {"hop_length": 160, "filter_length": 1024, "causal": True},
        "mel": {"n_mel_channels": 64},
    },
}
VOCODER: dict[str, Any] = {
    "resblock": "1",
    "stereo": True,
    "resblock_kernel_sizes": [3],
    "resblock_dilation_sizes": [[1, 3, 5]],
    "upsample_rates": [6, 5, 2, 2, 2],
    "upsample_kernel_sizes": [12, 10, 4, 4, 4],
    "upsample_initial_channel": 32,
    "output_sampling_rate": 24000,
}
CONFIG = {"transformer": TRANSFORMER, "vae": VAE, "audio_vae": AUDIO_VAE, "vocoder": VOCODER}

#: (latent frames, latent height, latent width, samples): 17x128x128 px (6 samples) and
#: 9x96x160 px (4 samples): a trial's data view keeps the first, the largest.
BUCKETS = ((3, 4, 4, 6), (2, 3, 5, 4))
FPS = 24.0
PROMPTS = (
    "A woman with long brown hair sits at a wooden desk typing on a laptop.",
    "A chef in a white uniform plates a gourmet dish in a professional kitchen.",
    "A red car drives along a coastal road at sunset.",
    "A cat sleeps on a sofa while a clock ticks.",
    "Steam rises from freshly cooked vegetables.",
)
SPECIAL_TOKENS = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
)
CORPUS = (
    *PROMPTS,
    "Soft natural light streams through a large window, casting warm shadows across the room.",
    "The audio captures the gentle clicking of keyboard keys and ambient room tone.",
    "blurry, out of focus, overexposed, underexposed, low contrast, washed out colors, noise.",
    "worst quality, inconsistent motion, blurry, jittery, distorted",
)


# --- models and data (runs in the trainer's venv: torch, transformers, ltx-core) -------------------


def _materialize(state: dict[str, Any]) -> dict[str, Any]:
    """Real random values for everything: ltx-core builds some sub-modules on the meta device, and
    allocates the AdaLN scale/shift tables with ``torch.empty`` (model.py:230,260,
    transformer.py:125-185): uninitialised memory (values up to 1e38 were seen) makes the loss NaN.
    Real checkpoints overwrite them; a random one must initialise them itself."""
    import torch

    out = {}
    for key, value in state.items():
        if value.device.type == "meta":
            value = (
                torch.randn(value.shape) * 0.02
                if value.is_floating_point()
                else torch.zeros(value.shape, dtype=value.dtype)
            )
        elif value.is_floating_point() and (
            "scale_shift_table" in key or not torch.isfinite(value).all() or value.abs().max() > 50
        ):
            value = torch.randn(value.shape) / max(1, value.shape[-1]) ** 0.5
        out[key] = value.detach().to("cpu").contiguous().clone()
    return out


def _bf16(state: dict[str, Any]) -> dict[str, Any]:
    import torch

    return {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in state.items()}


def build_tokenizer(gemma_dir: Path) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(CORPUS) * 4, trainer=trainer)
    ids = {s: tok.token_to_id(s) for s in SPECIAL_TOKENS}
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", ids["<bos>"])]
    )
    tok.save(str(gemma_dir / "tokenizer.json"))
    chat = (
        "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n"
        "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
        "{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
        "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
    )
    config = {
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "padding_side": "left",
        "add_bos_token": True,
        "add_eos_token": False,
        "extra_special_tokens": {
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
        "chat_template": chat,
    }
    (gemma_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return {**ids, "vocab_size": tok.get_vocab_size()}


#: transformers' Gemma 3 state-dict prefixes -> the checkpoint layout ltx-core's Gemma loader maps back.
GEMMA_PREFIXES = (
    ("model.language_model.", "language_model.model."),
    ("model.vision_tower.", "vision_tower.vision_model."),
    ("model.multi_modal_projector.", "multi_modal_projector."),
)


def build_gemma(gemma_dir: Path) -> None:
    from safetensors.torch import save_file
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    gemma_dir.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(gemma_dir)
    config = Gemma3Config(
        text_config={
            "vocab_size": ids["vocab_size"],
            "hidden_size": GEMMA_HIDDEN,
            "intermediate_size": 64,
            "num_hidden_layers": GEMMA_LAYERS,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "max_position_embeddings": 2048,
            "sliding_window": 64,
            "pad_token_id": ids["<pad>"],
            "bos_token_id": ids["<bos>"],
            "eos_token_id": ids["<eos>"],
        },
        vision_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 28,
            "patch_size": 14,
            "vision_use_head": False,
        },
        mm_tokens_per_image=4,
        boi_token_index=ids["<start_of_image>"],
        eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"],
    )
    config.save_pretrained(gemma_dir)
    state = {}
    for key, value in Gemma3ForConditionalGeneration(config).state_dict().items():
        if key == "lm_head.weight":
            continue  # tied to embed_tokens; ltx-core mirrors it at load (_with_tied_lm_head)
        new = next((dst + key[len(src) :] for src, dst in GEMMA_PREFIXES if key.startswith(src)), None)
        if new is None:
            raise KeyError(f"unexpected Gemma 3 weight {key}")
        state[new] = value
    save_file(_bf16(_materialize(state)), str(gemma_dir / "model.safetensors"), metadata={"format": "pt"})
    (gemma_dir / "processor_config.json").write_text(
        json.dumps({"processor_class": "Gemma3Processor", "image_seq_length": 4})
    )
    image = {
        "image_processor_type": "Gemma3ImageProcessor",
        "do_resize": True,
        "size": {"height": 28, "width": 28},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": True,
        "do_pan_and_scan": False,
        "processor_class": "Gemma3Processor",
    }
    (gemma_dir / "preprocessor_config.json").write_text(json.dumps(image))


def build_checkpoint(path: Path, gemma_dir: Path) -> None:
    """Every component from ltx-core's configurators, saved under the key names its SDOps map back."""
    import torch
    from ltx_core.model.audio_vae import (
        AudioDecoderConfigurator,
        AudioEncoderConfigurator,
        VocoderConfigurator,
    )
    from ltx_core.model.transformer.model_configurator import LTXModelConfigurator
    from ltx_core.model.video_vae import VideoDecoderConfigurator, VideoEncoderConfigurator
    from ltx_core.text_encoders.gemma import EmbeddingsProcessorConfigurator
    from safetensors.torch import save_file

    torch.manual_seed(0)
    metadata = {"config": CONFIG}
    tensors: dict[str, Any] = {}

    def add(prefixes: list[tuple[str, str]], state: dict[str, Any]) -> None:
        for key, value in _materialize(state).items():
            dst = next((d + key[len(s) :] for s, d in prefixes if key.startswith(s)), None)
            if dst is None:
                raise KeyError(f"no checkpoint prefix for {key}")
            tensors[dst] = value

    add([("", "model.diffusion_model.")], LTXModelConfigurator.from_metadata(metadata).state_dict())
    processor = EmbeddingsProcessorConfigurator.with_gemma_model_path(str(gemma_dir)).from_metadata(metadata)
    add(
        [
            ("video_connector.", "model.diffusion_model.video_embeddings_connector."),
            ("audio_connector.", "model.diffusion_model.audio_embeddings_connector."),
            ("feature_extractor.aggregate_embed.", "text_embedding_projection.aggregate_embed."),
        ],
        processor.state_dict(),
    )
    for configurator, stats, prefix in (
        (VideoDecoderConfigurator, "vae.per_channel_statistics.", "vae.decoder."),
        (VideoEncoderConfigurator, "vae.per_channel_statistics.", "vae.encoder."),
        (AudioDecoderConfigurator, "audio_vae.per_channel_statistics.", "audio_vae.decoder."),
        (AudioEncoderConfigurator, "audio_vae.per_channel_statistics.", "audio_vae.encoder."),
    ):
        add(
            [("per_channel_statistics.", stats), ("", prefix)],
            configurator.from_metadata(metadata).state_dict(),
        )
    add([("", "vocoder.")], VocoderConfigurator.from_metadata(metadata).state_dict())
    for key in list(tensors):  # per-channel statistics of mean 0, std 1 keep the latents O(1)
        if "per_channel_statistics" in key and "std" in key:
            tensors[key] = torch.ones_like(tensors[key])
        elif "per_channel_statistics" in key and "mean" in key:
            tensors[key] = torch.zeros_like(tensors[key])
    save_file(_bf16(tensors), str(path), metadata={"config": json.dumps(CONFIG)})


def verify(path: Path, gemma_dir: Path) -> None:
    """Reload every component with the trainer's own loaders; nothing may stay on meta."""
    from ltx_trainer import model_loader as ml

    loaded = {
        "transformer": ml.load_transformer(path),
        "embeddings_processor": ml.load_embeddings_processor(
            ml.embedding_weight_paths(path, gemma_dir), gemma_dir
        ),
        "video_vae_decoder": ml.load_video_vae_decoder(path),
        "video_vae_encoder": ml.load_video_vae_encoder(path),
        "audio_vae_decoder": ml.load_audio_vae_decoder(path),
        "audio_vae_encoder": ml.load_audio_vae_encoder(path),
        "vocoder": ml.load_vocoder(path),
        "text_encoder": ml.load_text_encoder(gemma_dir),
    }
    for name, module in loaded.items():
        tensors = list(module.named_parameters()) + list(module.named_buffers())
        meta = [n for n, p in tensors if p.device.type == "meta"]
        if meta:
            raise SystemExit(f"error: {name} has parameters left on the meta device: {meta[:5]}")
        print(f"  {name}: {type(module).__name__}, {sum(p.numel() for p in module.parameters()):,} params")


def build_data(path: Path, gemma_dir: Path, root: Path) -> None:
    """Random video/audio latents (the tiny VAE is random anyway) and real text conditions."""
    import torch
    from ltx_trainer.model_loader import embedding_weight_paths, load_embeddings_processor, load_text_encoder

    for folder in ("latents", "conditions", "audio_latents"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    encoder = load_text_encoder(gemma_dir, device="cpu", dtype=torch.bfloat16)
    processor = load_embeddings_processor(
        embedding_weight_paths(path, gemma_dir), gemma_dir, device="cpu", dtype=torch.bfloat16
    )
    generator = torch.Generator().manual_seed(0)
    index = 0
    for frames, height, width, count in BUCKETS:
        for _ in range(count):
            name = f"sample_{index:03d}.pt"
            latents = torch.randn(128, frames, height, width, generator=generator).to(torch.bfloat16)
            torch.save(
                {"latents": latents, "num_frames": frames, "height": height, "width": width, "fps": FPS},
                root / "latents" / name,
            )
            duration = (8 * (frames - 1) + 1) / FPS
            steps = max(1, round(duration * 16000 / 160 / 4))
            audio = torch.randn(8, steps, 16, generator=generator).to(torch.bfloat16)
            torch.save(
                {"latents": audio, "num_time_steps": steps, "frequency_bins": 16, "duration": duration},
                root / "audio_latents" / name,
            )
            with torch.inference_mode():
                hidden, mask = encoder.encode([PROMPTS[index % len(PROMPTS)]])[0]
                video, audio_embeds = processor.feature_extractor(hidden, mask, "left")
            condition = {
                "video_prompt_embeds": video[0].contiguous(),
                "prompt_attention_mask": mask[0].contiguous(),
            }
            if audio_embeds is not None:
                condition["audio_prompt_embeds"] = audio_embeds[0].contiguous()
            torch.save(condition, root / "conditions" / name)
            index += 1
    print(f"  data: {index} samples in {len(BUCKETS)} buckets under {root}")


def build(cache: Path) -> None:
    models = cache / "models"
    gemma_dir = models / "gemma"
    checkpoint = models / "ltx2-tiny.safetensors"
    models.mkdir(parents=True, exist_ok=True)
    build_gemma(gemma_dir)
    build_checkpoint(checkpoint, gemma_dir)
    print(f"wrote {checkpoint} ({checkpoint.stat().st_size / 1e6:.1f} MB) and {gemma_dir}")
    verify(checkpoint, gemma_dir)
    build_data(checkpoint, gemma_dir, cache / "data")


if __name__ == "__main__":
    build(Path(sys.argv[1]).resolve())
