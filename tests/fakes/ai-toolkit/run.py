"""A fake of ai-toolkit's ``run.py`` (ostris/ai-toolkit @ 27a03a9): no torch, a modelled card.

It takes the real command line (run.py:70-102: config files, ``-r``, ``-n``, ``-l``), reads the job
file as the real one does (toolkit/config.py:38-50, jobs/BaseJob.py:42-66: ``job``, ``config.name``,
``config.process`` with a known ``type``; every other key read with a default and unknown keys
ignored, as toolkit/config_modules.py does), and refuses what the real one refuses: a missing
``model.name_or_path`` (config_modules.py:665-666), ``gradient_accumulation`` with the legacy
``gradient_accumulation_steps`` (:461-463), an unknown qtype (toolkit/util/quantize.py:65-72) or
optimizer (toolkit/optimizer.py:75).

It then models the job (``toolkit/fake_model.py``): a card of ``AUTOTUNE_EMULATED_VRAM_GB`` (the
hook's env; none set: a card that never fills), host RAM really allocated for what it keeps off
the card, and per-step times it prints (never sleeps for):
- weights that do not fit at load: torch's CUDA OOM traceback, ``Error running job: ...`` (run.py:124)
  and exit 1;
- a step that does not fit: the banner ``# OOM during training step, skipping batch {n}/3 #``
  (BaseSDTrainProcess.py:2640-2645) and the next step, until the 4th in a row raises
  ``OOM during training step 3 times in a row, aborting training`` (:2636);
- otherwise ``steps`` steps with the job's tqdm bar on stderr (``smoothing=0.7``,
  toolkit/progress_bar.py:9; labelled with the job's name, BaseSDTrainProcess.py:2484-2490;
  postfix ``lr: {lr:.1e} loss: {loss:.3e}``, :2693-2698), sampling before training unless
  ``skip_first_sample``/``disable_sampling`` (:2477-2481), every ``sample_every`` steps and at the
  end unless ``disable_sampling`` (:2556-2561, :2820), saving every ``save_every`` steps but the
  first and at the end (:2554, :2706-2716, :2819, ``Saved checkpoint to ...`` :699), then
  run.py's ``Result:`` block (run.py:54-67).
Since torch is absent for the trial-side hook to watch, it writes the hook's JSON lines to
``AUTOTUNE_HOOK_FILE`` itself (trials/hook/sitecustomize.py's format).

Test-only env: ``FAKE_AITK_OOM_AT_STEP=k`` makes step k alone run out of memory (a transient
spike), ``FAKE_AITK_STEP_SLEEP_S`` really sleeps per step (to test that the runner ends a trial
that printed the banner and trained on). ``fake_trained_on.json`` in the job's folder says which
datasets and resolutions the run trained on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import yaml

sys.path.insert(
    0, os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
)  # tests/fakes: the hook's line format
from hookline import hook_text

sys.path.insert(0, os.getcwd())  # run.py:17

from toolkit.fake_model import HOST_MB_PER_GB, job_model

PROCESS_TYPES = ("sd_trainer", "ui_trainer")  # extensions_built_in/sd_trainer/__init__.py:8, :26
QTYPES = ("qfloat8", "qint8", "qint4", "qint2", "float8", "int8", *(f"uint{n}" for n in range(2, 9)))
OPTIMIZERS = ("adamw", "adamw8bit", "adam", "adam8bit", "prodigy", "adafactor", "lion", "lion8bit")


class JobError(Exception):
    pass


def print_end_message(completed: int, failed: int) -> None:
    """run.py:54-67."""
    failure = f"{failed} failure{'' if failed == 1 else 's'}" if failed > 0 else ""
    done = f"{completed} completed job{'' if completed == 1 else 's'}"
    print("")
    print("========================================")
    print("Result:")
    print(f" - {done}")
    if failure:
        print(f" - {failure}")
    print("========================================")


def load_job(path: str, name: str | None) -> dict:
    """toolkit/config.py:38-108 and jobs/BaseJob.py:20-66, for what the fake uses."""
    if not os.path.exists(path):
        raise JobError(f"Could not find config file {path}")
    with open(path, encoding="utf-8") as fh:
        config = yaml.safe_load(fh)
    if "job" not in config:
        raise JobError("config file must have a job key")
    if "config" not in config:
        raise JobError("config file must have a config section")
    if "name" not in config["config"] and name is None:
        raise JobError("config file must have a config.name key")
    text = json.dumps(config).replace("[name]", name or config["config"]["name"])
    config = json.loads(text)
    if config["job"] != "extension":
        raise JobError(f"Unknown job type {config['job']}")
    processes = config["config"].get("process")
    if processes is None:
        raise JobError('config file is invalid. Missing "config.process" key')
    if not isinstance(processes, list):
        raise JobError('config file is invalid. "config.process" must be a list of processes')
    for i, process in enumerate(processes):
        if "type" not in process:
            raise JobError(f'config file is invalid. Missing "config.process[{i}].type" key')
        if process["type"] not in PROCESS_TYPES:
            raise JobError(f"config file is invalid. Unknown process type: {process['type']}")
    return config


def settings(process: dict) -> dict:
    """The keys the fake models, with config_modules.py's defaults (line numbers there)."""
    model, train = process.get("model", {}), process.get("train", {})
    save, sample = process.get("save", {}), process.get("sample", {})
    if model.get("name_or_path") is None:
        raise JobError("name_or_path must be specified")  # :665-666
    accum_legacy = train.get("gradient_accumulation_steps", 1)  # :456
    accum = train.get("gradient_accumulation", 1)  # :460
    if accum > 1 and accum_legacy != 1:
        raise JobError("gradient_accumulation and gradient_accumulation_steps are mutually exclusive")
    quantize = model.get("quantize", False)  # :685
    qtype = model.get("qtype", "qfloat8")  # :687
    offloading = model.get("layer_offloading", False)  # :713
    if offloading and qtype == "qfloat8":
        qtype = "float8"  # :714-715
    qtype = qtype.split("|")[0]  # :742-743 (an accuracy recovery adapter)
    if quantize and qtype not in QTYPES:
        raise JobError(f"'{qtype}'")  # quantize.py:72: qtypes[qtype] raises KeyError
    optimizer = train.get("optimizer", "adamw").lower()  # :387
    if optimizer not in OPTIMIZERS:
        raise JobError(f"Unknown optimizer type {optimizer}")
    datasets = []
    for dataset in process.get("datasets", []):
        res = dataset.get("resolution", 512)  # :947, split per size at :1098-1113
        for size in res if isinstance(res, list) else [res]:
            datasets.append({"folder_path": dataset.get("folder_path"), "resolution": int(size),
                             "num_frames": int(dataset.get("num_frames", 1))})  # fmt: skip
    percent = float(model.get("layer_offloading_transformer_percent", 1.0))  # :730
    return {
        "qtype": ("qfloat8" if qtype == "float8" else qtype) if quantize else "none",
        "percent": percent if offloading else 0.0,  # flux2_model.py:170-178
        "low_vram": bool(model.get("low_vram", False)),  # :689
        "checkpointing": bool(train.get("gradient_checkpointing", True)),  # :413
        "optimizer": "adamw8bit" if optimizer.endswith("8bit") else "adamw",
        "batch": int(train.get("batch_size", 1)),  # :393
        "accum": int(accum),
        "steps": int(train.get("steps", 1000)),  # :380
        "lr": float(train.get("lr", 1e-6)),  # :381
        "disable_sampling": bool(train.get("disable_sampling", False)),  # :560
        "skip_first_sample": bool(train.get("skip_first_sample", False)),  # :411
        "sample_every": sample.get("sample_every", 100),  # :82
        "save_every": save.get("save_every", 1000),  # :25
        "training_folder": process.get("training_folder", "output"),
        "datasets": datasets,
    }


class Hook:
    """The trial-side hook's lines (trials/hook/sitecustomize.py), written by the fake itself."""

    def __init__(self) -> None:
        self.path = os.environ.get("AUTOTUNE_HOOK_FILE")
        self.peak = 0.0

    def event(self, kind: str, **fields: object) -> None:
        if self.path:
            record = {
                "event": kind,
                **fields,
                "max_memory_reserved_gb": round(self.peak, 4),
                "pid": os.getpid(),
            }
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(hook_text(record))


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


def bar_line(desc: str, n: int, total: int, elapsed: float, rate_s: float | None, postfix: str) -> str:
    """tqdm's default bar (``{l_bar}{bar}{r_bar}``), rate as ``s/it`` above one second per step."""
    frac = n / total if total else 0.0
    filled = int(frac * 10)
    bar = "\u2588" * filled + " " * (10 - filled)
    if rate_s is None:
        rate, left = "?it/s", "?"
    else:
        rate = f"{rate_s:5.2f}s/it" if rate_s > 1 else f"{1 / rate_s:5.2f}it/s"
        left = clock(rate_s * (total - n))
    tail = f", {postfix}" if postfix else ""
    return f"\r{desc}: {frac * 100:3.0f}%|{bar}| {n}/{total} [{clock(elapsed)}<{left}, {rate}{tail}]"


def cuda_oom(tried_gb: float, card_gb: float, used_gb: float) -> str:
    gib = 1e9 / 2**30
    return (
        f"CUDA out of memory. Tried to allocate {tried_gb * gib:.2f} GiB. GPU 0 has a total capacity of "
        f"{card_gb * gib:.2f} GiB of which {max(0.0, card_gb - used_gb) * gib:.2f} GiB is free. Including "
        f"non-PyTorch memory, this process has {used_gb * gib:.2f} GiB memory in use."
    )


def run_job(config: dict) -> None:
    job_name = config["config"]["name"]
    process = config["config"]["process"][0]
    s = settings(process)
    card = os.environ.get("AUTOTUNE_EMULATED_VRAM_GB")
    card_gb = float(card) if card else None
    size = max(s["datasets"], key=lambda d: d["resolution"] ** 2 * d["num_frames"]) if s["datasets"] else None
    model = job_model(
        qtype=s["qtype"], percent=s["percent"], low_vram=s["low_vram"], checkpointing=s["checkpointing"],
        optimizer=s["optimizer"], batch=s["batch"], accum=s["accum"],
        resolution=size["resolution"] if size else 1024, frames=size["num_frames"] if size else 1,
    )  # fmt: skip
    hook = Hook()
    host = bytearray(int(model["host_gb"] * HOST_MB_PER_GB * 2**20))
    for i in range(0, len(host), 4096):  # touched, so the pages count in RSS
        host[i] = 1
    print(f"Loading transformer{' (quantizing to ' + s['qtype'] + ')' if s['qtype'] != 'none' else ''}")
    if card_gb is not None and model["static_gb"] > card_gb:
        hook.peak = card_gb
        hook.event("exit", steps=-1, exception="OutOfMemoryError")
        raise MemoryError(cuda_oom(model["static_gb"] - card_gb, card_gb, card_gb))
    hook.peak = model["static_gb"]
    folder = os.path.join(s["training_folder"], job_name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "fake_trained_on.json"), "w", encoding="utf-8") as fh:
        json.dump({"datasets": s["datasets"], "batch_size": s["batch"]}, fh)
    if s["skip_first_sample"] or s["disable_sampling"]:
        print("Skipping first sample due to config setting")  # :2478
    else:
        print("Generating baseline samples before training")  # :2480
    oom_at = int(os.environ.get("FAKE_AITK_OOM_AT_STEP", "-1"))
    sleep_s = float(os.environ.get("FAKE_AITK_STEP_SLEEP_S", "0"))
    steps, elapsed, ema, consecutive = s["steps"], 0.0, None, 0
    sys.stderr.write(bar_line(job_name, 0, steps, 0.0, None, ""))
    for step in range(steps):
        jitter = 1.0 + 0.004 * ((step * 7) % 5 - 2)  # a little deterministic noise
        step_s = model["step_s"] * jitter * (2.5 if step == 0 else 1.0)  # the first step warms up
        too_big = card_gb is not None and model["peak_gb"] > card_gb
        if too_big or step == oom_at:
            consecutive += 1
            if consecutive > 3:
                raise RuntimeError("OOM during training step 3 times in a row, aborting training")  # :2636
            print("")
            print("################################################")
            print(f"# OOM during training step, skipping batch {consecutive}/3 #")  # :2643
            print("################################################")
            print("")
            sys.stdout.flush()
        else:
            consecutive = 0
            hook.peak = max(hook.peak, model["peak_gb"])
            loss = 0.12 + 0.05 / (step + 1)
            hook.event("step", step=step, step_time_s=round(step_s, 6), loss=loss,
                       samples=s["batch"] * s["accum"], counted=True)  # fmt: skip
        elapsed += step_s
        ema = step_s if ema is None else 0.7 * step_s + 0.3 * ema  # smoothing=0.7 (progress_bar.py:9)
        postfix = f"lr: {s['lr']:.1e} loss: {0.12 + 0.05 / (step + 1):.3e}"
        sys.stderr.write(bar_line(job_name, step + 1, steps, elapsed, ema, postfix))
        sys.stderr.flush()
        if sleep_s:
            time.sleep(sleep_s)
        if step != 0 and s["save_every"] and step % s["save_every"] == 0:
            print(f"\nSaving at step {step}")  # :2715
            print(f"Saved checkpoint to {os.path.join(folder, f'{job_name}_{step:09d}.safetensors')}")
        if step != 0 and not s["disable_sampling"] and s["sample_every"] and step % s["sample_every"] == 0:
            print(f"Generating samples at step {step}")
    sys.stderr.write("\n")
    path = os.path.join(folder, f"{job_name}.safetensors")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("fake weights\n")
    print(f"Saved checkpoint to {path}")  # :699, the save after the loop (:2819)
    if not s["disable_sampling"]:
        print("Generating samples at the end")  # :2820-2821
    hook.event("exit", steps=steps, exception=None)


def main() -> int:
    """run.py:70-143."""
    parser = argparse.ArgumentParser()
    parser.add_argument("config_file_list", nargs="+", type=str)
    parser.add_argument("-r", "--recover", action="store_true")
    parser.add_argument("-n", "--name", type=str, default=None)
    parser.add_argument("-l", "--log", type=str, default=None)
    args = parser.parse_args()
    print(f"Running {len(args.config_file_list)} job{'' if len(args.config_file_list) == 1 else 's'}")
    completed = failed = 0
    for config_file in args.config_file_list:
        try:
            run_job(load_job(config_file, args.name))
            completed += 1
        except (JobError, RuntimeError, MemoryError) as e:
            print(f"Error running job: {e}")
            failed += 1
            if not args.recover:
                print_end_message(completed, failed)
                sys.stdout.flush()
                kind = {JobError: "ValueError", RuntimeError: "RuntimeError"}.get(
                    type(e), "torch.OutOfMemoryError"
                )
                if isinstance(e, JobError) and re.fullmatch(r"'\w+'", str(e)):
                    kind = "KeyError"
                sys.stderr.write(
                    "Traceback (most recent call last):\n"
                    f'  File "{os.path.abspath(__file__)}", line 119, in main\n'
                    "    job.run()\n"
                    f"{kind}: {e}\n"
                )
                return 1
    print_end_message(completed, failed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
