"""A sweep's setup: from the options to a frozen ``SweepPlan`` (trainer, baseline, card, space, strategy).

Everything here is decided once, before the first trial, and never changes while the
sweep runs; the loop, the executors and the conclusion read it, none writes it. The
order of the checks is the user's: an unknown trainer or a bad config is said before
the card is looked at, and the tier gate before anything is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from optuna.distributions import BaseDistribution

from autotune.config.knobs import check_baseline_values, read_knob_file
from autotune.core.knobflag import FLAG, DeclaredKnob, parse_knobs
from autotune.core.metrics import effective_batch
from autotune.core.space import Candidate, Space, normalize_value, same_param
from autotune.core.strategy import Observation, Strategy, Verdict
from autotune.core.units import format_gb
from autotune.errors import AutotuneError, NvmlUnavailable, UsageError
from autotune.gpu.nvml import GIB, Nvml, open_nvml
from autotune.gpu.probe import VisibleGpu
from autotune.store import study as st
from autotune.store import urls
from autotune.store.settings import settings_record
from autotune.sweep.naming import config_hash, default_study_name
from autotune.sweep.options import DEFAULT_MAX_BATCH_SIZE, DEFAULT_STEPS, SweepOptions
from autotune.trainers.base import Baseline, TrainerAdapter


class SearchStrategy(Protocol):
    """What the sweep asks of a strategy (``autotune.core.strategy.Strategy``, or a benchmarked one)."""

    def next_candidate(self, history: Sequence[Observation]) -> Candidate | None: ...

    def remeasure(self, history: Sequence[Observation]) -> Candidate | None: ...

    def best(self, history: Sequence[Observation]) -> Observation | None: ...

    def ruled_out(self, history: Sequence[Observation]) -> list[Verdict]: ...

    def could_win(self, history: Sequence[Observation]) -> Mapping[Candidate, float]: ...


#: Builds the strategy: ``(space, baseline candidate, card GB, headroom)``, as ``Strategy`` takes them.
StrategyFactory = Callable[[Space, Candidate, float, float], SearchStrategy]


@dataclass(frozen=True)
class Card:
    """The card a sweep judges fit against (the smallest visible one, or a planned/emulated one)."""

    name: str
    vram_gb: float
    count: int
    tier: str | None
    indices: tuple[int, ...] = ()  # NVML indices to sample and drain; empty without a GPU
    #: How the card is emulated, in a sentence ("counted: ...", "capped: ...", "not emulated: ..."),
    #: or "" for the real card.
    emulation: str = ""

    def as_setting(self) -> dict[str, Any]:
        return {"name": self.name, "vram_gb": round(self.vram_gb, 2), "count": self.count, "tier": self.tier}


@dataclass(frozen=True)
class SweepPlan:
    """Everything the sweep decided before its first trial (replaces the attributes once set in ``_run``)."""

    opts: SweepOptions
    nvml: Nvml | None  # the GPUs' sampling and drain; None without a driver
    adapter: TrainerAdapter
    baseline: Baseline
    card: Card
    space: Space
    base_candidate: Candidate
    base_params: dict[str, Any]  # the baseline's knob values, without its accumulation
    base_ga: int
    strategy: SearchStrategy
    distributions: dict[str, BaseDistribution]
    settings: dict[str, Any]  # stored on the study: a resume must match them
    steps: int
    target_effective: int
    num_gpus: int
    storage_url: str
    study_name: str
    workdir: Path
    #: Knobs of the trainer's knob file the command never receives (``knobs_in_play``): not swept.
    knobs_left_out: tuple[str, ...] = ()
    nvml_error: str | None = None  # why there is no NVML (the driver's own words), for the fit check
    #: The host RAM line (GB): ``--host-ram-gb``, else this machine's RAM (``machine_ram_gb``).
    host_ram_gb: float | None = None

    @property
    def study_dir(self) -> Path:
        return self.workdir / self.study_name

    def data_warnings(self) -> list[str]:
        """What the full run drops of the data at the baseline's batch, and past which batch the
        sweep tries it would (the adapter's ``data_warnings``: diffusion-pipe's short buckets)."""
        return list(
            self.adapter.data_warnings(
                self.baseline,
                batch_size=self.space.batch(self.base_candidate),
                gradient_accumulation_steps=self.base_ga,
                data_parallel=self.adapter.data_parallel(self.baseline),
                max_batch_size=max(self.space.batch_values()),
            )
        )


def open_nvml_for(nvml: Nvml | bool | None) -> tuple[Nvml | None, str | None]:
    """``True``: the driver's NVML (None without one); an ``Nvml``: that one; else none.
    With it, why there is none (``NvmlUnavailable``'s reason), for the fit check to say."""
    if nvml is True:
        try:
            return open_nvml(), None
        except NvmlUnavailable as exc:
            return None, str(exc)
    return (nvml or None), (None if nvml else "turned off for this sweep")


def plan_sweep(
    opts: SweepOptions,
    nvml_arg: Nvml | bool | None,
    *,
    pin: VisibleGpu | None = None,
    strategy_factory: StrategyFactory = Strategy,
) -> SweepPlan:
    """Resolve the options into the plan: trainer, baseline, card (``pin``: this worker's), space, strategy.

    ``nvml_arg``: ``True`` opens the driver's NVML (none without one), an ``Nvml`` is used as it is.
    """
    from autotune.trainers import get_adapter

    workdir = urls.check_workdir(opts.workdir.expanduser().resolve())
    storage_url = urls.check_storage_url(opts.storage or urls.default_storage_url(workdir))
    study_name = st.validate_study_name(opts.study or default_study_name(opts))

    from autotune.trainers import adapter_class

    options = dict(opts.trainer_options)
    if opts.cmd is not None:
        options.setdefault("template", opts.cmd)
    declared = declared_knobs(opts)
    if declared:
        options["knobs"] = [k.name for k in declared]
        if flags := {k.name: k.flag for k in declared if k.flag is not None}:
            options["flags"] = flags
    hook = (
        {"hook": opts.hook} if adapter_class(opts.trainer).traits.takes_hook and "hook" not in options else {}
    )
    adapter = get_adapter(opts.trainer, **options, **hook)
    baseline = adapter.load_baseline(opts.config)
    nvml, nvml_error = open_nvml_for(nvml_arg)
    card = pick_card(opts, adapter, baseline, nvml, pin=pin)
    if opts.vram_gb is not None:
        baseline = adapter.with_emulated_vram(baseline, opts.vram_gb)
    host_changes: list[str] = []
    if not card.indices:  # no GPU seen: the trials run where there is no CUDA
        baseline, host_changes = adapter.without_cuda(baseline)
    gate(opts, adapter, card)

    knob_path = opts.knob_file or adapter.knob_path()
    knob_data = adapter.knob_file_data(baseline, read_knob_file(knob_path))
    base_params = adapter.baseline_params(baseline)
    check_baseline_values(base_params, knob_data, lambda param: adapter.knob_location(baseline, param))
    base_ga = int(base_params.pop("gradient_accumulation_steps", 1) or 1)
    base_params.update(declared_baseline(declared, base_params))
    num_gpus = adapter.data_parallel(baseline)
    target_effective = effective_batch(int(base_params.get("batch_size", 1)), base_ga, num_gpus)
    max_bs = opts.max_batch_size or (max(opts.batch_sizes) if opts.batch_sizes else DEFAULT_MAX_BATCH_SIZE)
    limit = adapter.max_batch_size(baseline)
    if limit is not None:
        max_bs = min(max_bs, int(limit))
    if opts.keep_effective_batch:
        max_bs = min(max_bs, max(1, target_effective // num_gpus))
    max_bs = max(max_bs, int(base_params.get("batch_size", 1)))

    full = Space.from_mapping(
        knob_data,
        source=str(knob_path),
        max_batch_size=max_bs,
        allow_extra_savers=opts.allow_extra_savers,
        batch_ladder=opts.batch_sizes,
        limits=adapter.knob_limits(baseline),
    )
    space = space_in_play(full, adapter, baseline, declared)
    knobs = [st.knob_def_of(space.knob(k.name), k) for k in st.knob_defs(knob_data) if k.name in space.names]
    knobs += [st.knob_def_of(k.knob(), st.KnobDef(name=k.name, values=k.values)) for k in declared]
    dists = st.distributions(knobs, max_bs)
    base_params = {name: base_params[name] for name in space.names}
    base_cand = space.candidate(base_params)
    held_back = {} if opts.allow_extra_savers else space.held_back(base_cand)
    space = space.keep_fidelity(base_cand) if held_back else space
    strategy = strategy_factory(space, base_cand, card.vram_gb, opts.headroom)

    steps = opts.steps or DEFAULT_STEPS
    adapter.check_steps(steps)
    settings = {
        "trainer": opts.trainer,
        "config_path": str(baseline.path) if baseline.path else None,
        "base_config_hash": config_hash(baseline.text),
        "knobs": [
            {
                "name": k.name,
                "values": [st.to_study_value(v) for v in k.values],
                "extra_savers": [st.to_study_value(v) for v in k.extra_savers],
                "type": k.kind,
            }
            for k in knobs
        ],
        "steps": steps,
        "headroom": opts.headroom,
        "max_batch_size": max_bs,
        "keep_effective_batch": opts.keep_effective_batch,
        "allow_extra_savers": opts.allow_extra_savers,
        "card": card.as_setting(),
        **({"declared_knobs": [k.spec for k in declared]} if declared else {}),
        # How the trainer is launched (--cmd's template, --trainer-dir): part of what the sweep is.
        "trainer_options": options,
        "hook": opts.hook,
        "batch_sizes": None if opts.batch_sizes is None else ",".join(map(str, space.batch_values())),
    }
    # For the report's launch command (informational: a resume may change them, see store.settings).
    if opts.full_steps is not None:
        settings["full_steps"] = opts.full_steps
    if held_back:  # informational (the knobs, the baseline and the flag decide it): for the report
        settings["held_back"] = {n: [st.to_study_value(v) for v in vals] for n, vals in held_back.items()}
    if card.emulation:  # informational: the report says how the card was emulated
        settings["emulation"] = card.emulation
    if host_changes:  # only when some: they change what every trial runs (the report warns)
        settings["host_changes"] = host_changes
    if opts.host_ram_gb is not None:  # only when given: a resume elsewhere has another machine's RAM
        settings["host_ram_gb"] = opts.host_ram_gb
    elif (ram := machine_ram_gb()) is not None:  # informational: the report states the host line
        settings["machine_ram_gb"] = round(ram, 3)
    launch_folder = adapter.launch_folder()  # where a template trainer's trials run
    if launch_folder is not None:
        settings["launch_cwd"] = str(launch_folder)
    return SweepPlan(
        opts=opts,
        nvml=nvml,
        adapter=adapter,
        baseline=baseline,
        card=card,
        space=space,
        base_candidate=base_cand,
        base_params=base_params,
        base_ga=base_ga,
        strategy=strategy,
        distributions=dists,
        settings=settings_record(settings),
        steps=steps,
        target_effective=target_effective,
        num_gpus=num_gpus,
        storage_url=storage_url,
        study_name=study_name,
        workdir=workdir,
        knobs_left_out=tuple(n for n in full.names if n not in space.names),
        nvml_error=nvml_error,
        host_ram_gb=opts.host_ram_gb or machine_ram_gb(),
    )


def machine_ram_gb() -> float | None:
    """This machine's RAM in GB (the default host line); ``None`` when it cannot be read."""
    import psutil

    try:
        return float(psutil.virtual_memory().total) / 2**30
    except (OSError, RuntimeError):
        return None


def declared_knobs(opts: SweepOptions) -> list[DeclaredKnob]:
    """The sweep's ``--knob`` flags, parsed; only a template trainer (``--cmd``) takes them."""
    if not opts.knobs:
        return []
    from autotune.trainers import adapter_class

    declared = parse_knobs(opts.knobs)
    if not adapter_class(opts.trainer).traits.takes_template:
        raise UsageError(
            f"{FLAG} declares a knob of a trainer run through --cmd; trainer {opts.trainer!r} has its own "
            f"knob set. Drop {FLAG}, or sweep through --cmd 'python train.py ... {{{declared[0].name}}}'"
        )
    return declared


def declared_baseline(declared: Sequence[DeclaredKnob], found: Mapping[str, Any]) -> dict[str, Any]:
    """The baseline's value of each declared knob: the config's (key NAME) when it has one, which
    must be a listed value; else the memory-saving end (the first value)."""
    out: dict[str, Any] = {}
    for k in declared:
        if k.name not in found:
            out[k.name] = k.values[0]
            continue
        value = found[k.name]
        try:
            value = normalize_value(value)
        except AutotuneError:
            value = str(value)
        match = next((v for v in k.values if same_param(v, value) and type(v) is type(value)), None)
        if match is None:
            raise UsageError(
                f"{FLAG} {k.spec!r}: the baseline config holds {k.name}: {value!r}, which is not one of "
                f"its values; add it to the list (in its place from memory-saving to memory-hungry)"
            )
        out[k.name] = match
    return out


def space_in_play(
    full: Space, adapter: TrainerAdapter, baseline: Baseline, declared: Sequence[DeclaredKnob]
) -> Space:
    """The knobs the trainer really receives (``knobs_in_play``), then the declared ones: no knob
    the command never sees is varied, shown or used to break a tie."""
    clash = [k.name for k in declared if k.name in full.names]
    if clash:
        raise UsageError(
            f"{FLAG} {clash[0]}: {adapter.traits.label} already has a knob of that name (its knobs: "
            f"{', '.join(full.names)}); give your knob another name"
        )
    names = [*full.names, *(k.name for k in declared)]
    in_play = set(adapter.knobs_in_play(baseline, names))
    unused = [k.name for k in declared if k.name not in in_play]
    if unused:
        raise UsageError(
            f"{FLAG} {unused[0]}: the command never receives it: the template has no {{{unused[0]}}} "
            f"and the --config file no key {unused[0]}; put {{{unused[0]}}} in --cmd, or drop the {FLAG}"
        )
    return full.restricted(in_play, extra=[k.knob() for k in declared])


def pick_card(
    opts: SweepOptions,
    adapter: TrainerAdapter,
    baseline: Baseline,
    nvml: Nvml | None,
    *,
    pin: VisibleGpu | None = None,
) -> Card:
    """The card to judge fit on: --vram-gb, else the card the trainer emulates, else the
    smallest visible GPU. With --vram-gb the card is emulated where the trainer or the trial-side
    hook can (counted on CPU, capped on a larger GPU; ``Card.emulation`` says how, or why not).
    The GPUs found are sampled and drained either way. A pinned worker
    (``pin``: ``--parallel``, ``autotune worker``) runs one single-GPU trial on its own card."""
    card = _card(opts, adapter, baseline, nvml)
    if pin is None:
        return card
    gpus_per_trial = max(1, baseline.num_gpus)
    if gpus_per_trial > 1:
        raise UsageError(
            f"this config launches each trial on {gpus_per_trial} GPUs, but --parallel and "
            "'autotune worker' run one single-GPU trial per card; plan for one GPU "
            "('autotune plan --gpus 1 ...') to sweep card by card, or run 'autotune sweep' without "
            "--parallel to give every trial all the cards"
        )
    # One single-GPU trial per card: the card is the pinned one (all of one model, checked).
    return dataclasses.replace(card, count=1, indices=(pin.nvml_index,))


def trial_env(pin: VisibleGpu | None) -> dict[str, str]:
    """Environment added to every trial (a pinned worker's ``CUDA_VISIBLE_DEVICES``)."""
    return {} if pin is None else {"CUDA_VISIBLE_DEVICES": pin.uuid}


def _card(opts: SweepOptions, adapter: TrainerAdapter, baseline: Baseline, nvml: Nvml | None) -> Card:
    gpus = _visible_gpus(nvml)
    indices = tuple(i for i, _, _ in gpus)
    count = max(1, len(gpus))
    where = f" on {gpus[0][1]}" if gpus else " (CPU)"
    emulated = adapter.emulated_vram_gb(baseline)
    if opts.vram_gb is not None:
        gb = opts.vram_gb
        how = emulation_note(adapter, gb, gpus)
        if adapter.emulates_card():
            return Card(f"emulated {format_gb(gb)} card{where}", gb, count, _tier(gb), indices, how)
        name = gpus[0][1] if gpus else f"planned {gb:g} GB card"
        return Card(name, gb, count, _tier(gb), indices, how)
    if isinstance(emulated, (int, float)) and emulated > 0:
        gb = float(emulated)
        how = emulation_note(adapter, gb, gpus)
        return Card(f"emulated {format_gb(gb)} card{where}", gb, count, _tier(gb), indices, how)
    if gpus:
        _, name, total = min(gpus, key=lambda g: g[2])
        gb = total / GIB
        return Card(name, gb, count, _tier(gb), indices)
    raise UsageError(
        "no GPU found (NVML unavailable or no device), so there is no card to judge fit against; "
        "pass --vram-gb N to sweep for a card of N GB, or run 'autotune sweep' with no arguments "
        "for the CPU demo"
    )


def emulation_note(adapter: TrainerAdapter, gb: float, gpus: Sequence[tuple[int, str, int]]) -> str:
    """How a ``gb`` card is emulated for this adapter's trials, in one sentence (or why it is not)."""
    who = (
        adapter.traits.label
        if adapter.traits.emulates_vram
        else "the trial-side hook"
        if adapter.emulates_card()
        else None
    )
    card = f"{format_gb(gb)} card"
    if gpus:
        _, name, total = min(gpus, key=lambda g: g[2])
        if who is None:
            return f"not emulated (--no-hook): trials use the whole {name}; fit is judged against a {card}"
        if gb * GIB >= total:
            return (
                f"not capped: the {card} is not smaller than the {name} ({format_gb(total / GIB)}), so "
                "trials use the whole GPU"
            )
        return (
            f"capped: {who} limits each trial's process to {format_gb(gb)} of the {name} "
            f"({format_gb(total / GIB)}) with torch.cuda.set_per_process_memory_fraction"
        )
    if who is None:
        return (
            "not emulated: no GPU and the trial-side hook is off (--no-hook), so nothing limits or "
            "measures the trials' memory; fit is judged only from what the trainer reports itself"
        )
    what = (
        "live tensor storage"
        if adapter.traits.emulates_vram
        else "the tensor storage a GPU run would hold on the device (not host-held data such as a dataset in CPU tensors)"
    )
    return f"counted: {who} counts {what} on CPU and raises torch's OutOfMemoryError past {format_gb(gb)}"


def gate(opts: SweepOptions, adapter: TrainerAdapter, card: Card) -> None:
    """A trainer that needs 32 GB (the LTX-2 trainer): below that, refuse unless --force."""
    if not adapter.traits.needs_tier_gate or card.tier != "below-32GB" or opts.force:
        return
    from autotune.errors import UnsupportedCardError

    raise UnsupportedCardError(
        f"{card.name} has {card.vram_gb:.1f} GB: {adapter.traits.label} requires a 32 GB card and no tested "
        "config exists below it. Options: a larger card, --vram-gb N to plan for one, or --force to "
        "try the low-VRAM config at your own risk"
    )


# --- small helpers --------------------------------------------------------------------------------


def _tier(vram_gb: float) -> str | None:
    """The VRAM tier id (``below-32GB``, ``32GB``, ``40-60GB``, ``80GB+``) of a card size."""
    from autotune.gpu.tiers import classify

    try:
        return str(classify(vram_gb).tier)
    except (ValueError, AutotuneError):
        return None


def _visible_gpus(nvml: Nvml | None) -> list[tuple[int, str, int]]:
    """(NVML index, name, total bytes) of the GPUs this process may use (``CUDA_VISIBLE_DEVICES`` kept)."""
    if nvml is None:
        return []
    from autotune.gpu.probe import probe

    try:
        result = probe(lambda: nvml)
        return [(g.nvml_index, g.name, g.memory_total_bytes) for g in result.gpus]
    except Exception:
        return []
