"""Simulated LTX-2 LoRA landscapes: a memory model and a speed model per knob combination and batch.

Used in-process by ``tests/core/test_strategy.py`` and, through ``sim_trainer.py``, as a
real trainer subprocess by the sweep tests and the benchmark. Time is
simulated: nothing sleeps.

Calibration (GiB, seconds), from LTX2-TRAINER.md and PEERS.md:
- The transformer is ~19-22B parameters: 36-42 GiB of bf16 weights, about half with
  int8-quanto. The low-VRAM config (int8, 8-bit AdamW, batch 1, checkpointing) sits
  near 31 GB on an RTX 5090 (32 GB) at the resolutions people train there.
- LoRA optimizer state is small: AdamW 0.8-4 GiB, 8-bit AdamW 35-65 % of that.
- Activations with gradient checkpointing: 1.5-12 GiB per sample (resolution and
  frames grow with the card); without it 6-14x more, so checkpointing off "usually
  OOMs with tens of GB apparently free": the OOM message's single allocation is a
  big activation block larger than what is free.
- Speed: step time = (fixed + per_sample * b * (1 + quad * b)) * quantization factor
  * checkpointing factor + optimizer step, i.e. convex in the batch size. int8-quanto
  is 0.75-1.5x the bf16 compute time (sometimes faster, sometimes slower); int4 can
  be up to 10x slower than int2. Checkpointing off saves the recompute (0.68-0.85x).
  Near the memory limit some cards slow down (allocator retries).

Variety the search was not designed on, so a benchmark cannot be fitted to:
- memory in steps: the caching allocator hands out blocks (``mem_step_gb``, 0.25-2 GiB on
  most landscapes) and fragmentation grows with the batch (``frag_growth``), so peaks are
  not exactly affine in the batch size;
- speed that saturates (the quadratic term) or dips at odd batch sizes (``odd_slowdown``:
  a batch that is not a multiple of ``odd_multiple`` pays up to 12 % more per step);
- quantization families from 0.3x to 1.2x the speed of none;
- noise: 1-10 % per step, and a run-to-run bias of 20-50 % of that (a run's median moves;
  its per-step spread shows how noisy the card is);
- model loads of 1 to 10 minutes per trial.

Batch sizes are integers: ``grid`` and ``true_best`` span every batch from 1 to
``max_batch_size``, not a power-of-two ladder.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

QUANT_NONE = "none"

#: (name, total GiB as the card reports it, nominal tier, compute seconds per sample range)
CARDS: tuple[tuple[str, float, str, tuple[float, float]], ...] = (
    ("NVIDIA GeForce RTX 5090", 31.84, "32GB", (4.0, 8.0)),
    ("NVIDIA RTX 6000 Ada Generation", 47.50, "40-60GB", (5.0, 9.0)),
    ("NVIDIA L40S", 44.99, "40-60GB", (4.5, 8.5)),
    ("NVIDIA A100-SXM4-80GB", 79.15, "80GB+", (4.0, 7.0)),
    ("NVIDIA H100 80GB HBM3", 79.65, "80GB+", (2.0, 4.0)),
    ("NVIDIA H200", 139.81, "80GB+", (1.8, 3.5)),
)

#: Activation GiB per sample with checkpointing, by tier: bigger cards train bigger clips.
ACT_RANGE = {"32GB": (1.5, 5.0), "40-60GB": (2.0, 7.0), "80GB+": (3.0, 12.0)}

KNOBS_YAML = """\
knobs:
  - name: quantization
    values: [int8-quanto, none]
    extra_savers: [int4-quanto, int2-quanto]
  - name: optimizer
    values: [adamw8bit, adamw]
  - name: batch_size
    type: int
  - name: gradient_checkpointing
    values: [true, false]
fidelity: {quantization: none, optimizer: adamw}
"""

LOW_VRAM = {
    "quantization": "int8-quanto",
    "optimizer": "adamw8bit",
    "batch_size": 1,
    "gradient_checkpointing": True,
}
STANDARD = {"quantization": "none", "optimizer": "adamw", "batch_size": 1, "gradient_checkpointing": True}


@dataclass(frozen=True)
class SimRun:
    """What one simulated trial produced."""

    outcome: str  # "ok" or "oom"
    seconds: float  # simulated wall time of the trial, model load included
    samples_per_s: float | None = None
    step_time_s: float | None = None
    spread: float | None = None  # relative: half the interquartile range of step times / median
    peak_vram_gb: float | None = None
    step_times_s: tuple[float, ...] = ()
    oom_tried_gb: float | None = None
    oom_free_gb: float | None = None


@dataclass(frozen=True)
class Landscape:
    """One card + workload: memory and speed of every candidate."""

    name: str
    seed: int
    card: str
    card_gb: float
    tier: str
    headroom: float
    max_batch_size: int
    allow_extra_savers: bool
    baseline: dict[str, Any]
    context_gb: float
    weights_gb: dict[str, float]
    optimizer_gb: dict[str, float]
    act_on_gb: float
    act_off_factor: float
    quant_act_factor: dict[str, float]
    frag: float
    per_sample_s: float
    fixed_s: float
    quad: float
    quant_speed: dict[str, float]
    opt_step_s: dict[str, float]
    ckpt_off_speed: float
    pressure_at: float
    pressure_slowdown: float
    step_noise: float
    run_noise: float
    load_s: float
    mem_step_gb: float = 0.0
    frag_growth: float = 0.0
    odd_multiple: int = 1
    odd_slowdown: float = 1.0
    notes: list[str] = field(default_factory=list)

    # -- the models ----------------------------------------------------------------------
    @property
    def fit_limit_gb(self) -> float:
        return (1.0 - self.headroom) * self.card_gb

    def _static_gb(self, p: dict[str, Any]) -> float:
        return self.context_gb + self.weights_gb[p["quantization"]] + self.optimizer_gb[p["optimizer"]]

    def _act_per_sample_gb(self, p: dict[str, Any]) -> float:
        act = self.act_on_gb * self.quant_act_factor[p["quantization"]]
        return act if p["gradient_checkpointing"] else act * self.act_off_factor

    def peak_gb(self, params: dict[str, Any]) -> float:
        """True peak device memory (GiB) the run would need."""
        p = _norm(params)
        b = int(p["batch_size"])
        raw = (self._static_gb(p) + self._act_per_sample_gb(p) * b) * (1.0 + self.frag + self.frag_growth * b)
        if self.mem_step_gb > 0:  # the allocator reserves whole blocks
            raw = math.ceil(raw / self.mem_step_gb) * self.mem_step_gb
        return raw

    def ooms(self, params: dict[str, Any]) -> bool:
        return self.peak_gb(params) > self.card_gb

    def fits(self, params: dict[str, Any]) -> bool:
        return self.peak_gb(params) <= self.fit_limit_gb

    def step_time_s(self, params: dict[str, Any]) -> float:
        """True steady-state step time (seconds) when the run does not OOM."""
        p = _norm(params)
        b = int(p["batch_size"])
        compute = (self.fixed_s + self.per_sample_s * b * (1.0 + self.quad * b)) * self.quant_speed[
            p["quantization"]
        ]
        if not p["gradient_checkpointing"]:
            compute *= self.ckpt_off_speed
        t = compute + self.opt_step_s[p["optimizer"]]
        if self.peak_gb(p) > self.pressure_at * self.card_gb:
            t *= self.pressure_slowdown
        if b % self.odd_multiple:
            t *= self.odd_slowdown
        return t

    def samples_per_s(self, params: dict[str, Any]) -> float:
        return int(_norm(params)["batch_size"]) / self.step_time_s(params)

    # -- the grid and its answer ---------------------------------------------------------
    def quantizations(self) -> list[str]:
        """The quantizations a sweep may try: none below the baseline's without extra savers (the
        sweep never lowers the baseline's fidelity unasked: ``autotune.core.space.Space.keep_fidelity``)."""
        if self.allow_extra_savers:
            return ["int2-quanto", "int4-quanto", "int8-quanto", QUANT_NONE]
        q = ["int8-quanto", QUANT_NONE]
        return q[q.index(_norm(self.baseline)["quantization"]) :]

    def optimizers(self) -> list[str]:
        """The optimizers a sweep may try: no 8-bit AdamW on an AdamW baseline without extra savers."""
        o = ["adamw8bit", "adamw"]
        return o if self.allow_extra_savers else o[o.index(self.baseline["optimizer"]) :]

    def batch_sizes(self) -> list[int]:
        """Every integer batch size up to the maximum: the grid the search replaces."""
        return list(range(1, self.max_batch_size + 1))

    def grid(self) -> list[dict[str, Any]]:
        return [
            {"quantization": q, "optimizer": o, "batch_size": b, "gradient_checkpointing": c}
            for q in self.quantizations()
            for o in self.optimizers()
            for b in self.batch_sizes()
            for c in (True, False)
        ]

    def true_best(self) -> tuple[dict[str, Any], float] | None:
        """The fastest fitting candidate of the grid and its true samples/s (None: nothing fits)."""
        fitting = [p for p in self.grid() if self.fits(p)]
        if not fitting:
            return None
        best = max(fitting, key=self.samples_per_s)
        return best, self.samples_per_s(best)

    # -- one simulated trial -------------------------------------------------------------
    def simulate(self, params: dict[str, Any], *, steps: int = 50, run: int = 0) -> SimRun:
        """One trial of ``steps`` steps; deterministic in (landscape, params, run)."""
        p = _norm(params)
        rng = random.Random(_stable_seed(self.seed, p, run))
        b = int(p["batch_size"])
        load = self.load_s * rng.uniform(0.95, 1.05)
        peak = self.peak_gb(p)
        if peak > self.card_gb:
            # The first step dies on one big activation block, larger than what is free.
            static = min(self.card_gb, self._static_gb(p) * (1.0 + self.frag))
            free = max(0.05, (self.card_gb - static) * rng.uniform(0.05, 0.6))
            tried = free * rng.uniform(1.05, 2.0) + 0.02
            first_step = self.step_time_s({**p, "batch_size": b}) * 0.3
            return SimRun("oom", load + first_step, peak_vram_gb=None, oom_tried_gb=tried, oom_free_gb=free)
        t = self.step_time_s(p)
        bias = 1.0 + rng.gauss(0.0, self.run_noise)
        warmup = [t * rng.uniform(1.5, 3.0), t * rng.uniform(1.0, 1.2)]
        times = warmup + [
            max(0.05 * t, t * bias * (1.0 + rng.gauss(0.0, self.step_noise))) for _ in range(steps)
        ]
        steady = sorted(times[2:])
        median = statistics.median(steady)
        q1, q3 = _quantile(steady, 0.25), _quantile(steady, 0.75)
        spread = (q3 - q1) / 2.0 / median
        measured_peak = peak  # the allocator is reproducible for a fixed config
        return SimRun(
            "ok",
            load + sum(times),
            samples_per_s=b / median,
            step_time_s=median,
            spread=spread,
            peak_vram_gb=measured_peak,
            step_times_s=tuple(times),
        )

    # -- serialisation (the sim trainer reads a spec file) -----------------------------------
    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Landscape:
        return cls(**json.loads(text))


def _norm(params: dict[str, Any]) -> dict[str, Any]:
    p = dict(params)
    if p.get("quantization") is None:
        p["quantization"] = QUANT_NONE
    gc = p.get("gradient_checkpointing")
    if isinstance(gc, str):
        p["gradient_checkpointing"] = gc.lower() == "true"
    p["batch_size"] = int(p["batch_size"])
    return p


def _stable_seed(seed: int, params: dict[str, Any], run: int) -> int:
    key = json.dumps([seed, sorted((k, str(v)) for k, v in params.items()), run])
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


def _quantile(sorted_values: list[float], q: float) -> float:
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def generate(seed: int) -> Landscape:
    """One varied, realistic landscape, a pure function of ``seed``."""
    rng = random.Random(seed)
    card, card_gb, tier, compute_range = rng.choice(CARDS)
    notes: list[str] = []
    allow_extra = (tier == "32GB" and rng.random() < 0.5) or rng.random() < 0.1
    baseline = dict(LOW_VRAM if tier != "80GB+" else STANDARD)

    bf16 = rng.uniform(36.0, 42.0)
    weights = {QUANT_NONE: bf16, "int8-quanto": bf16 * rng.uniform(0.50, 0.56)}
    weights["int4-quanto"] = bf16 * rng.uniform(0.30, 0.34)
    weights["int2-quanto"] = bf16 * rng.uniform(0.20, 0.24)
    adamw = rng.uniform(0.8, 4.0)
    optimizer = {"adamw": adamw, "adamw8bit": adamw * rng.uniform(0.35, 0.65)}
    lo, hi = ACT_RANGE[tier]
    act_on = rng.uniform(lo, hi)
    quant_act = {
        QUANT_NONE: 1.0,
        "int8-quanto": rng.uniform(1.0, 1.08),
        "int4-quanto": rng.uniform(1.0, 1.1),
        "int2-quanto": rng.uniform(1.0, 1.1),
    }

    per_sample = rng.uniform(*compute_range)
    fixed = per_sample * rng.choice([rng.uniform(0.03, 0.3), rng.uniform(0.3, 1.5)])
    quad = 0.0 if rng.random() < 0.5 else rng.uniform(0.0, 0.03)
    # Quantized families run at 0.3x to 1.2x the speed of none: compute time 1/1.2 to 1/0.3.
    int8 = 1.0 / rng.uniform(0.3, 1.2)
    int2 = 1.0 / rng.uniform(0.3, 1.2)
    int4 = 1.0 / rng.uniform(0.3, 1.2)
    quant_speed = {QUANT_NONE: 1.0, "int8-quanto": int8, "int4-quanto": int4, "int2-quanto": int2}
    notes.append(f"int8 is {'faster' if int8 < 1 else 'slower'} than bf16 ({int8:.2f}x compute)")
    opt_adamw = per_sample * rng.uniform(0.005, 0.03)
    opt_step = {"adamw": opt_adamw, "adamw8bit": opt_adamw * rng.uniform(0.8, 1.5)}
    pressure = rng.random() < 0.3
    land = Landscape(
        name=f"L{seed:03d}-{card.split()[-1]}",
        seed=seed,
        card=card,
        card_gb=card_gb,
        tier=tier,
        headroom=rng.choice([0.05, 0.07, 0.10]),
        max_batch_size=rng.choice([8, 12, 16, 16, 16, 32]),
        allow_extra_savers=allow_extra,
        baseline=baseline,
        context_gb=rng.uniform(1.0, 2.5),
        weights_gb=weights,
        optimizer_gb=optimizer,
        act_on_gb=act_on,
        act_off_factor=rng.uniform(6.0, 14.0),
        quant_act_factor=quant_act,
        frag=rng.uniform(0.02, 0.08),
        per_sample_s=per_sample,
        fixed_s=fixed,
        quad=quad,
        quant_speed=quant_speed,
        opt_step_s=opt_step,
        ckpt_off_speed=rng.uniform(0.68, 0.85),
        pressure_at=rng.uniform(0.93, 0.97) if pressure else 2.0,
        pressure_slowdown=rng.uniform(1.05, 1.25) if pressure else 1.0,
        step_noise=(step_noise := rng.uniform(0.01, 0.10)),
        run_noise=step_noise * rng.uniform(0.2, 0.5),
        load_s=rng.uniform(60.0, 600.0),
        mem_step_gb=rng.choice([0.0, 0.25, 0.5, 1.0, 2.0]),
        frag_growth=rng.choice([0.0, rng.uniform(0.0, 0.006)]),
        odd_multiple=rng.choice([1, 1, 2, 4, 8]),
        odd_slowdown=rng.uniform(1.0, 1.12),
        notes=notes,
    )
    return land


def space_of(land: Landscape) -> Any:
    """The space a sweep of ``land`` searches: the knob file's, for its maximum batch, with the
    baseline's fidelity kept unless the landscape allows extra savers (as ``autotune sweep`` builds it)."""
    from autotune.core.space import Space

    space = Space.from_text(
        KNOBS_YAML, max_batch_size=land.max_batch_size, allow_extra_savers=land.allow_extra_savers
    )
    if land.allow_extra_savers:
        return space
    return space.keep_fidelity(space.candidate(land.baseline))


def suite(n: int = 60, *, first_seed: int = 1) -> list[Landscape]:
    """The standard suite: ``n`` landscapes from consecutive seeds (varied cards and workloads)."""
    return [generate(s) for s in range(first_seed, first_seed + n)]


# -- a script swept with --cmd: a declared precision knob and batch sizes up to 4096 ----------------
SCRIPT_KNOBS_YAML = """\
knobs:
  - name: precision
    values: [bf16-mixed, 32-true]
  - name: batch_size
    type: int
"""


@dataclass(frozen=True)
class ScriptLandscape:
    """A small script (a Lightning module swept through ``--cmd`` on an emulated card): a declared
    ``precision`` knob (bf16-mixed, 32-true) and every batch size up to 4096 (1..64, then doubling).

    The shape two public scripts showed: on CPU bf16 is emulated, so 32-true runs 2-2.6x faster per
    sample while holding twice the activations; per-step overhead is small next to the batch's
    compute, so samples/s keeps rising with the batch and the winner is 32-true at the largest batch
    it fits, 1024 (its limit lies between 1100 and 1900), not bf16 at 2048.
    """

    seed: int
    card_gb: float
    headroom: float
    max_batch_size: int
    baseline: dict[str, Any]
    static_gb: float
    act_gb: dict[str, float]
    fixed_s: float
    per_sample_s: dict[str, float]
    step_noise: float
    run_noise: float
    load_s: float

    def peak_gb(self, params: dict[str, Any]) -> float:
        return self.static_gb + self.act_gb[params["precision"]] * int(params["batch_size"])

    def fits(self, params: dict[str, Any]) -> bool:
        return self.peak_gb(params) <= (1.0 - self.headroom) * self.card_gb

    def samples_per_s(self, params: dict[str, Any]) -> float:
        b = int(params["batch_size"])
        return b / (self.fixed_s + self.per_sample_s[params["precision"]] * b)

    def true_best(self, batches: Sequence[int]) -> tuple[dict[str, Any], float]:
        fitting = [
            {"precision": p, "batch_size": b}
            for p in self.act_gb
            for b in batches
            if self.fits({"precision": p, "batch_size": b})
        ]
        best = max(fitting, key=self.samples_per_s)
        return best, self.samples_per_s(best)

    def simulate(self, params: dict[str, Any], *, steps: int = 50, run: int = 0) -> SimRun:
        rng = random.Random(_stable_seed(self.seed, params, run))
        peak = self.peak_gb(params)
        if peak > self.card_gb:
            return SimRun("oom", self.load_s)
        b = int(params["batch_size"])
        t = b / self.samples_per_s(params)
        bias = 1.0 + rng.gauss(0.0, self.run_noise)
        times = sorted(
            max(0.05 * t, t * bias * (1.0 + rng.gauss(0.0, self.step_noise))) for _ in range(steps)
        )
        median = statistics.median(times)
        spread = (_quantile(times, 0.75) - _quantile(times, 0.25)) / 2.0 / median
        return SimRun("ok", self.load_s + sum(times), b / median, median, spread, peak, tuple(times))


def generate_script(seed: int) -> ScriptLandscape:
    """One script landscape, a pure function of ``seed`` (see ``ScriptLandscape``)."""
    rng = random.Random(seed)
    act32 = rng.uniform(0.002, 0.01)  # GiB per sample at 32-true
    static = rng.uniform(0.05, 0.5)
    headroom = 0.1
    limit32 = rng.uniform(1100.0, 1900.0)
    card = (static + act32 * limit32) / (1.0 - headroom)
    per_bf16 = rng.uniform(0.002, 0.01)
    return ScriptLandscape(
        seed=seed,
        card_gb=card,
        headroom=headroom,
        max_batch_size=4096,
        baseline={"precision": "bf16-mixed", "batch_size": rng.choice([16, 32, 64])},
        static_gb=static,
        act_gb={"bf16-mixed": act32 / 2.0, "32-true": act32},
        fixed_s=rng.uniform(0.01, 0.05),
        per_sample_s={"bf16-mixed": per_bf16, "32-true": per_bf16 / rng.uniform(2.0, 2.6)},
        step_noise=(noise := rng.uniform(0.01, 0.05)),
        run_noise=noise * rng.uniform(0.2, 0.5),
        load_s=rng.uniform(2.0, 10.0),
    )
