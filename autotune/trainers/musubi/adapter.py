"""kohya-ss/musubi-tuner: Wan 2.1/2.2 (``wan_train_network.py``) and HunyuanVideo (``hv_train_network.py``).

Facts are from the trainer's source at commit 30c658c (paths below are in that checkout).

The baseline is the user's launch command as docs/wan.md:170-179 writes it (``accelerate launch
--num_cpu_threads_per_process 1 --mixed_precision bf16 src/musubi_tuner/wan_train_network.py --task
t2v-1.3B --dit ... --dataset_config x.toml ...``), a shell script read without a shell
(``autotune.config.shellscript``) or sana's YAML record (``script:``, ``args:``, ``launcher:``,
``cwd:``, ``env:``). The knobs are its own flags, plus the batch size of its dataset TOML:

- ``blocks_to_swap``: ``--blocks_to_swap N`` (parser_common.py:391-396; 0 or absent: no swap,
  trainer_base.py:1496); at most ``num_blocks - 1`` (wan/modules/model.py:752-754): 39 for the
  14B models (wan/configs/wan_t2v_14B.py:30, 40 layers), 29 for 1.3B (wan_t2v_1_3B.py:30), 38 for
  HunyuanVideo (20 double and 40 single blocks, hunyuan_model/models.py:518-519, swapped as
  ``n // 2`` double and ``(n - n // 2) * 2 + 1`` single with at most 19 and 39, :680-685; the
  training docs say 38 too, docs/hunyuan_video.md:409). None with Wan 2.2's ``--dit_high_noise``
  and ``--offload_inactive_dit``: the trainer refuses block swap beside it
  (wan_train_network.py:82-86). Swapped blocks live in host RAM (docs/block_swap.md).
- ``precision``: ``fp8`` = ``--fp8_base`` (the whole DiT cast to float8, model.py:1036-1037);
  ``fp8_scaled`` = ``--fp8_base --fp8_scaled`` (only the blocks' linears to fp8 with scales; norms
  and embeddings stay bf16, model.py:536-541, so a little larger than ``fp8``; it requires
  ``--fp8_base``, trainer_base.py:1398; HunyuanVideo has no ``--fp8_scaled``, parser_common.py:384-387);
  ``bf16`` = neither.
- ``gradient_checkpointing``: ``--gradient_checkpointing``; ``gradient_checkpointing_cpu_offload``
  (a count, 1 or 0, so that its host-RAM order is the offload one: 1 saves device memory and costs
  host RAM): ``--gradient_checkpointing_cpu_offload``, the activations offloaded to host RAM. It acts
  only with ``--gradient_checkpointing`` (trainer_base.py:1608-1609, docs/hunyuan_video.md:242), so
  without it the flag is left out (the same command as 0: the sweep runs it once).
- ``optimizer``: ``--optimizer_type adamw8bit``/``adamw`` (read case-insensitively,
  trainer_base.py:166,186,226). Its help calls AdamW the default (parser_common.py:303-307), but
  an absent flag reaches ``getattr(torch.optim, "")`` (trainer_base.py:166,231-243), so a trial
  always spells it out; absent in the baseline reads as AdamW.
- ``split_attn``: ``--split_attn`` (attention one sample at a time, parser_common.py:77-82).
- ``batch_size``: ``batch_size`` in the dataset TOML (``--dataset_config``); a trial edits a copy.

The short-run recipe (trainer_base.py @ 30c658c): ``--max_train_steps N`` without
``--max_train_epochs`` (which overrides it, :1639-1646); no sampling (``--sample_at_first``,
``--sample_every_n_*``, ``--sample_prompts`` dropped, :1998-2001, :2091, :2156); no intermediate
saves or state (``--save_every_n_*``, ``--save_state*``, ``--save_last_n_*`` dropped, :2092, :2142,
:2170); the one save the full run makes at its end kept (:2173-2175), under ``--output_dir
<trial>/output``; no resume, trackers or hub uploads. The training bar is ``tqdm(...,
smoothing=0, desc="steps")`` with an ``avr_loss`` postfix (:1920, :2116-2118) whose first step is
cut off by ``reset()`` (:2085-2086): ``read_tqdm_cumulative`` reads its per-step times.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from autotune.config.tomledit import TomlConfig
from autotune.core.metrics import TrialMetrics
from autotune.errors import UsageError
from autotune.trainers.base import TrainerAdapter, TrainerTraits, read_baseline
from autotune.trainers.kit.argv import (
    drop_flags,
    flag_number,
    flag_value,
    has_flag,
    set_value_flag,
)
from autotune.trainers.kit.common import adapter_options, check_params, check_positive_int
from autotune.trainers.kit.launchscript import SCRIPT_HEAD, command_lines, python_argv, write_launch_files
from autotune.trainers.kit.output import read_trial_metrics
from autotune.trainers.kit.readers.tqdmbar import read_tqdm_cumulative
from autotune.trainers.musubi.command import HEREDOC, read_command
from autotune.trainers.musubi.data import (
    baseline_batch_size,
    largest_bucket,
    make_trial_dataset,
    read_datasets,
    set_batch_size,
)
from autotune.trainers.musubi.flags import (
    DATASET_FLAG,
    GRAD_ACCUM_FLAG,
    KNOBS,
    OPTIMIZER_FLAG,
    OPTIMIZERS,
    OUTPUT_FLAG,
    STEPS_FLAG,
    SWAP_FLAG,
    precision_of,
    set_knob_flags,
    swap_maximum,
)
from autotune.trainers.values import NO_WINNER, Baseline, Params, TrialLaunch, TrialRun, Winner

#: Short-run recipe: value flags and store_true flags a trial leaves out (see the module docstring).
DROP_VALUE_FLAGS = (
    "--max_train_epochs",
    "--sample_every_n_steps",
    "--sample_every_n_epochs",
    "--sample_prompts",
    "--save_every_n_steps",
    "--save_every_n_epochs",
    "--save_last_n_epochs",
    "--save_last_n_epochs_state",
    "--save_last_n_steps",
    "--save_last_n_steps_state",
    "--resume",
    "--log_with",
    "--logging_dir",
    "--wandb_api_key",
    "--huggingface_repo_id",
)
DROP_BOOL_FLAGS = ("--sample_at_first", "--save_state", "--save_state_on_train_end")


#: The error when no --config is given: what to pass.
NO_CONFIG = (
    "trainer 'musubi' needs your training command: pass --config FILE, a script with the line "
    "'accelerate launch ... src/musubi_tuner/wan_train_network.py --dataset_config x.toml ...' "
    "(docs/wan.md), or a YAML with script:, args:, optional launcher:, cwd:, env:"
)


class MusubiAdapter(TrainerAdapter):
    """Options: ``trainer_dir`` (the musubi-tuner checkout the command runs in; default: the
    command's ``cd``, else its file's folder), ``launcher`` (argv that runs Python in place of the
    command's ``accelerate launch ...``, the CLI's ``--trainer-python``), ``hook`` (the trial-side
    hook: step times, peak memory, the ``--vram-gb`` card; default on)."""

    knob_keys: ClassVar[Mapping[str, str]] = {
        "blocks_to_swap": SWAP_FLAG,
        "gradient_accumulation_steps": GRAD_ACCUM_FLAG,
        "optimizer": OPTIMIZER_FLAG,
    }

    def knob_location(self, baseline: Baseline, param: str) -> str:
        if param == "batch_size":  # the dataset config's, not the command's
            return f"{baseline.data.get('dataset_path', '<dataset config>')}: batch_size"
        return super().knob_location(baseline, param)

    name: ClassVar[str] = "musubi"
    knob_file: ClassVar[str] = "musubi.yaml"
    traits: ClassVar[TrainerTraits] = TrainerTraits(
        label="musubi-tuner",
        takes_trainer_python=True,
        takes_hook=True,
        config_suffix=".sh",
        longer_input="a longer clip or a larger bucket in the data",
    )

    def __init__(self, **options: Any) -> None:
        shared = adapter_options(options, self.name, ("launcher", "hook", "trainer_dir"))
        self.launcher, self.hook = shared.launcher, shared.hook
        self.trainer_dir = shared.trainer_dir.expanduser().absolute() if shared.trainer_dir else None
        if self.trainer_dir is not None and not self.trainer_dir.is_dir():
            raise UsageError(
                f"--trainer-dir {self.trainer_dir}: no such folder (give your musubi-tuner checkout)"
            )

    # --- the baseline ----------------------------------------------------------------------------

    def load_baseline(self, config: Path | None) -> Baseline:
        return read_baseline(config, self.baseline_from_text, NO_CONFIG)

    def baseline_from_text(self, text: str, path: Path | None = None) -> Baseline:
        record = read_command(text, path, self.trainer_dir)
        return Baseline(trainer=self.name, text=text, data=record, path=path)

    def knob_limits(self, baseline: Baseline) -> dict[str, int]:
        return {"blocks_to_swap": swap_maximum(baseline.data["script"], baseline.data["args"])}

    def baseline_params(self, baseline: Baseline) -> dict[str, Any]:
        args = baseline.data["args"]
        optimizer = (flag_value(args, OPTIMIZER_FLAG) or "adamw").lower()
        gc = has_flag(args, "--gradient_checkpointing")
        offload = int(gc and has_flag(args, "--gradient_checkpointing_cpu_offload"))
        return {
            "blocks_to_swap": self._swap_of(baseline),
            "precision": precision_of(args),
            "gradient_checkpointing": gc,
            "gradient_checkpointing_cpu_offload": offload,
            "optimizer": optimizer if optimizer in OPTIMIZERS else "adamw",
            "split_attn": has_flag(args, "--split_attn"),
            "batch_size": self._batch_of(baseline),
            "gradient_accumulation_steps": flag_number(args, GRAD_ACCUM_FLAG, 1),  # parser_common.py:191-196
        }

    def knobs_in_play(self, baseline: Baseline, names: Sequence[str]) -> list[str]:
        """All knobs, but the optimizer only when the baseline uses AdamW or AdamW8bit (another
        one, say Adafactor, is kept as it is); precision ``fp8_scaled`` does not exist for HunyuanVideo
        but fp8 and bf16 do, so precision stays."""
        optimizer = (flag_value(baseline.data["args"], OPTIMIZER_FLAG) or "adamw").lower()
        return [n for n in names if n != "optimizer" or optimizer in OPTIMIZERS]

    def _swap_of(self, baseline: Baseline) -> int | str:
        """The baseline's swap, capped at the model's maximum; a negative or non-number is left
        as written for the baseline check to name."""
        value = flag_number(baseline.data["args"], SWAP_FLAG, 0)
        if isinstance(value, int) and value >= 0:
            return min(value, swap_maximum(baseline.data["script"], baseline.data["args"]))
        return value

    def _batch_of(self, baseline: Baseline) -> int:
        toml = TomlConfig(baseline.data["dataset_text"], baseline.data["dataset_path"])
        found = largest_bucket(read_datasets(toml, Path(baseline.data["cwd"]), baseline.data["arch"]))
        return found[0].batch_size if found is not None else baseline_batch_size(toml)

    # --- rendering -------------------------------------------------------------------------------

    def knob_args(
        self, baseline: Baseline, params: Params, gradient_accumulation_steps: int
    ) -> tuple[list[str], int]:
        """The baseline's args with the knob flags set (order kept, new flags at the end), and the batch."""
        check_params(params, KNOBS, self.name)
        base = self.baseline_params(baseline)
        merged = {**base, **params}
        batch = check_positive_int("batch_size", merged["batch_size"])
        check_positive_int("gradient_accumulation_steps", gradient_accumulation_steps)
        args = set_knob_flags(baseline.data, merged, gradient_accumulation_steps)
        return args, batch

    def write_trial(self, baseline: Baseline, params: Params, run: TrialRun) -> TrialLaunch:
        args, batch = self.knob_args(baseline, params, run.gradient_accumulation_steps)
        args = drop_flags(args, DROP_VALUE_FLAGS, DROP_BOOL_FLAGS)
        args = set_value_flag(args, STEPS_FLAG, str(run.steps))
        args = set_value_flag(args, OUTPUT_FLAG, str(run.trial_dir / "output"))
        record = baseline.data
        toml = TomlConfig(record["dataset_text"], record["dataset_path"])
        run.trial_dir.mkdir(parents=True, exist_ok=True)
        dataset_text, view = make_trial_dataset(
            toml, Path(record["cwd"]), record["arch"], batch, run.trial_dir
        )
        dataset_file = run.trial_dir / "dataset.toml"
        dataset_file.write_text(dataset_text, encoding="utf-8")
        args = set_value_flag(args, DATASET_FLAG, str(dataset_file))
        gpus = max(1, baseline.num_gpus)
        argv = self._argv(record, args, gpus)
        env = write_launch_files(run.trial_dir, record, args, argv)
        return TrialLaunch(
            argv=argv,
            cwd=Path(record["cwd"]),
            batch_size=batch,
            env=env,
            record={"data_bucket": view.describe()},
        )

    def _argv(self, record: dict[str, Any], args: list[str], gpus: int) -> list[str]:
        """``launcher script args``: the command's own ``accelerate launch ...`` (``--num_processes``
        set for several GPUs), or ``--trainer-python`` (through ``accelerate.commands.launch`` for several)."""
        if self.launcher is not None:
            return python_argv(self.launcher, record["script"], args, gpus)
        launcher = list(record["launcher"])
        if gpus > 1 and any(Path(t).name == "accelerate" for t in launcher[:1]) and "launch" in launcher:
            launcher = set_value_flag(launcher, "--num_processes", str(gpus))
        return [*launcher, record["script"], *args]

    # --- reading ---------------------------------------------------------------------------------

    def read_metrics(self, trial_dir: Path, output: str) -> TrialMetrics:
        return read_trial_metrics(
            trial_dir, output, lambda text, _: read_tqdm_cumulative(text), own_rate=False
        )

    # --- the winner ------------------------------------------------------------------------------

    def final_config(self, baseline: Baseline, params: Params, *, gradient_accumulation_steps: int) -> str:
        """A runnable bash script: the baseline command with only the knob flags changed. When the
        batch size changes, the script first writes the dataset TOML with only ``batch_size``
        changed (comments kept) beside the original, and trains with that one."""
        record = baseline.data
        args, batch = self.knob_args(baseline, params, gradient_accumulation_steps)
        lines = list(SCRIPT_HEAD)
        if batch != self._batch_of(baseline):
            toml = TomlConfig(record["dataset_text"], record["dataset_path"])
            set_batch_size(toml, batch)
            original = Path(record["dataset_path"])
            target = original.with_name(f"{original.stem}.autotune{original.suffix or '.toml'}")
            lines += [
                f"# {original.name} with batch_size = {batch} (everything else as it was):",
                f"cat > {shlex.quote(str(target))} <<'{HEREDOC}'",
                toml.text.rstrip("\n"),
                HEREDOC,
            ]
            args = set_value_flag(args, DATASET_FLAG, str(target))
        lines += command_lines(record, self._argv(record, args, max(1, baseline.num_gpus)))
        return "\n".join(lines) + "\n"

    def training_command(self, config_path: Path, winner: Winner = NO_WINNER) -> str:
        return f"bash {shlex.quote(str(config_path))}"


__all__ = ["MusubiAdapter", "swap_maximum"]
