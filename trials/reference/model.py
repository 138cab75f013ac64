"""A small video diffusion transformer, shaped like LTX-2's where the memory knobs act.

Latents ``(C, F, H, W)`` are cut into 3-D patches; each block has self-attention (``attn1``),
cross-attention to text embeddings (``attn2``), a feed-forward net (``ff.net.0.proj``, ``ff.net.2``)
and AdaLN-single timestep modulation (one shared timestep MLP, a per-block scale/shift table), as in
LTX-Video/PixArt. Attention projections are named ``to_q``, ``to_k``, ``to_v``, ``to_out.0`` so the
LTX-2 ``lora.target_modules`` apply as they are. Every projection is a plain ``nn.Linear``, so
optimum-quanto can quantize the frozen base weights; LoRA adapters are added after quantization and
stay fp32 and trainable. Trained with the rectified-flow (flow-matching) velocity loss.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trials.reference.config import DataShape, ModelShape


def timestep_embedding(t: torch.Tensor, dim: int = 256) -> torch.Tensor:
    """Sinusoidal embedding of timesteps in [0, 1] (scaled to 0..1000 as diffusion models do)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = (t.float() * 1000.0)[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def positions_3d(grid: tuple[int, int, int], dim: int) -> torch.Tensor:
    """Fixed sin-cos position embedding over (frame, row, column), one third of ``dim`` per axis."""
    per_axis = (dim // 6) * 2
    parts = []
    coords = torch.meshgrid(*[torch.arange(n, dtype=torch.float32) for n in grid], indexing="ij")
    for axis in coords:
        half = per_axis // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / max(half, 1))
        angles = axis.reshape(-1, 1) * freqs[None]
        parts += [torch.sin(angles), torch.cos(angles)]
    emb = torch.cat(parts, dim=-1)
    return F.pad(emb, (0, dim - emb.shape[-1]))


class Attention(nn.Module):
    """Multi-head attention with diffusers-style projection names (``to_out.0`` is the output Linear)."""

    def __init__(self, dim: int, heads: int, context_dim: int | None = None) -> None:
        super().__init__()
        context_dim = context_dim or dim
        self.heads = heads
        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(context_dim, dim)
        self.to_v = nn.Linear(context_dim, dim)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim), nn.Dropout(0.0)])

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        context = x if context is None else context
        b, n, d = x.shape
        q = self.to_q(x).view(b, n, self.heads, -1).transpose(1, 2)
        k = self.to_k(context).view(b, context.shape[1], self.heads, -1).transpose(1, 2)
        v = self.to_v(context).view(b, context.shape[1], self.heads, -1).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v)
        out = out.transpose(1, 2).reshape(b, n, d)
        for layer in self.to_out:
            out = layer(out)
        return out


class GELUProj(nn.Module):
    """``ff.net.0``: projection then tanh-GELU, named like diffusers' ``GELU`` (``.proj``)."""

    def __init__(self, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x), approximate="tanh")


class FeedForward(nn.Module):
    def __init__(self, dim: int, mult: int) -> None:
        super().__init__()
        self.net = nn.Sequential(GELUProj(dim, dim * mult), nn.Dropout(0.0), nn.Linear(dim * mult, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Block(nn.Module):
    """Self-attention, cross-attention and feed-forward, modulated by the timestep (AdaLN-single)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn1 = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn2 = Attention(dim, heads)
        self.norm3 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ff = FeedForward(dim, mlp_ratio)
        self.scale_shift_table = nn.Parameter(torch.randn(6, dim) / dim**0.5)

    def forward(self, x: torch.Tensor, text: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        mod = self.scale_shift_table[None] + temb.view(temb.shape[0], 6, -1)
        shift1, scale1, gate1, shift2, scale2, gate2 = mod.unbind(dim=1)
        h = self.norm1(x) * (1 + scale1[:, None]) + shift1[:, None]
        x = x + gate1[:, None] * self.attn1(h)
        x = x + self.attn2(self.norm2(x), text)
        h = self.norm3(x) * (1 + scale2[:, None]) + shift2[:, None]
        return x + gate2[:, None] * self.ff(h)


class VideoTransformer(nn.Module):
    """The denoiser: predicts the flow-matching velocity for noisy latents, a timestep and text."""

    def __init__(self, shape: ModelShape, data: DataShape) -> None:
        super().__init__()
        dim = shape.hidden_dim
        self.patch = shape.patch_size
        self.channels = data.channels
        grid = (
            data.frames // self.patch[0],
            data.height // self.patch[1],
            data.width // self.patch[2],
        )
        self.grid = grid
        patch_dim = data.channels * math.prod(self.patch)
        self.patchify_proj = nn.Linear(patch_dim, dim)
        self.time_embed = nn.Sequential(nn.Linear(256, dim), nn.SiLU(), nn.Linear(dim, 6 * dim))
        self.caption_projection = nn.Sequential(
            nn.Linear(data.text_dim, dim), nn.GELU(approximate="tanh"), nn.Linear(dim, dim)
        )
        self.transformer_blocks = nn.ModuleList(
            [Block(dim, shape.heads, shape.mlp_ratio) for _ in range(shape.depth)]
        )
        self.norm_out = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.out_scale_shift = nn.Parameter(torch.randn(2, dim) / dim**0.5)
        self.proj_out = nn.Linear(dim, patch_dim)
        self.register_buffer("pos", positions_3d(grid, dim), persistent=False)
        self.gradient_checkpointing = False

    def patchify(self, latents: torch.Tensor) -> torch.Tensor:
        """(B, C, F, H, W) -> (B, tokens, C*pf*ph*pw)."""
        b, c, f, h, w = latents.shape
        pf, ph, pw = self.patch
        x = latents.reshape(b, c, f // pf, pf, h // ph, ph, w // pw, pw)
        x = x.permute(0, 2, 4, 6, 1, 3, 5, 7)
        return x.reshape(b, (f // pf) * (h // ph) * (w // pw), c * pf * ph * pw)

    def forward(self, tokens: torch.Tensor, sigma: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        x = self.patchify_proj(tokens) + self.pos
        temb_in = timestep_embedding(sigma).to(x.dtype)
        temb = self.time_embed(temb_in)
        context = self.caption_projection(text)
        for block in self.transformer_blocks:
            if self.gradient_checkpointing and torch.is_grad_enabled():
                x = checkpoint(block, x, context, temb, use_reentrant=False)
            else:
                x = block(x, context, temb)
        shift, scale = (
            self.out_scale_shift[None] + temb[:, : 2 * x.shape[-1]].view(-1, 2, x.shape[-1])
        ).unbind(dim=1)
        x = self.norm_out(x) * (1 + scale[:, None]) + shift[:, None]
        return self.proj_out(x)


class LoRALinear(nn.Module):
    """A frozen base projection (plain or quanto-quantized) plus a trainable low-rank update."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float) -> None:
        super().__init__()
        in_features = base.in_features
        out_features = base.out_features
        self.base_layer = base
        self.lora_A = nn.Linear(in_features, rank, bias=False)
        self.lora_B = nn.Linear(rank, out_features, bias=False)
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.scaling = alpha / rank
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    @property
    def in_features(self) -> int:
        return self.lora_A.in_features

    @property
    def out_features(self) -> int:
        return self.lora_B.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def _matches(name: str, targets: tuple[str, ...]) -> bool:
    """PEFT's rule for a list of target names: the module name is one, or ends with ``.`` + one."""
    return any(name == t or name.endswith("." + t) for t in targets)


def add_lora(
    model: nn.Module, rank: int, alpha: float, dropout: float, targets: tuple[str, ...]
) -> list[str]:
    """Freeze the model and wrap every targeted Linear in a LoRA adapter; return the wrapped names."""
    model.requires_grad_(False)
    wrapped = []
    for name, module in list(model.named_modules()):
        if not _matches(name, targets) or not isinstance(module, nn.Linear):
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoRALinear(module, rank, alpha, dropout))
        wrapped.append(name)
    return wrapped


def trainable_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    return (p for p in model.parameters() if p.requires_grad)
