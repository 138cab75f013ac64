"""The outcome classifier and the OOM parser, against a table of real texts."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from autotune.core.metrics import TrialMetrics
from autotune.core.outcome import NOTABLE_KEYWORDS, NOTABLE_SOURCE, Outcome, explain, parse_oom

TORCH_OOM = (
    "Traceback (most recent call last):\n"
    '  File "/app/packages/ltx-trainer/scripts/train.py", line 42, in <module>\n'
    "    trainer.train()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
    "of 139.81 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 138.68 GiB "
    "memory in use. Of the allocated memory 135.20 GiB is allocated by PyTorch, and 2.31 GiB is reserved "
    "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
    "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
)
TORCH_OOM_OLD = (
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; "
    "14.56 GiB already allocated; 3.19 MiB free; 14.70 GiB reserved in total by PyTorch) If reserved "
    "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.\n"
)
RANK0_OOM = (
    "[rank0]: Traceback (most recent call last):\n"
    '[rank0]:   File "/app/scripts/train.py", line 42, in <module>\n'
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total "
    "capacity of 79.25 GiB of which 301.88 MiB is free. Process 2201 has 78.94 GiB memory in use.\n"
    "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 1 has a total "
    "capacity of 79.25 GiB of which 290.00 MiB is free.\n"
    "E1129 19:20:01.123000 2201 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)\n"
)
HIP_OOM = (
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity "
    "of 191.98 GiB of which 0.98 GiB is free. Of the allocated memory 180.2 GiB is allocated by PyTorch\n"
)
XPU_OOM = (
    "RuntimeError: XPU out of memory. Tried to allocate 256.00 MiB (GPU 0; 15.11 GiB total capacity; "
    "14.68 GiB already allocated; 14.89 GiB reserved in total by PyTorch)\n"
)
CUDA_ERROR_OOM = (
    "RuntimeError: CUDA error: out of memory\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
    "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
)
CUBLAS = "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n"
CUDNN = (
    "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
    "non-contiguous input.\n"
)
NCCL_OOM = "node1:2201:2250 [0] NCCL INFO include/alloc.h:48 NCCL WARN Cuda failure 2 'out of memory'\n"
CPU_ALLOC = (
    "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 85899345920 bytes. Error code 12 (Cannot allocate memory)\n"
)
# The same allocator's other wording (Windows builds, and pinned-memory failures): Fooocus#237, MKLpy#27.
CPU_ALLOC_NOT_ENOUGH = (
    "RuntimeError: [enforce fail at ..\\c10\\core\\impl\\alloc_cpu.cpp:72] data. DefaultCPUAllocator: "
    "not enough memory: you tried to allocate 26214400 bytes.\n"
)
PY_MEMORY_ERROR = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nMemoryError\n'
ILLEGAL_ACCESS = (
    "Traceback (most recent call last):\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call\n"
)
MEMORY_USAGE = "INFO     memory usage: 3 GB\nINFO     Loaded model in 12.3 s\n"
MAX_MEMORY_KEY = "acceleration:\n  max_memory: {0: '70GiB'}\n  offload_to_cpu: false\nDone.\n"
LTX2_CONFIG_ERROR = (
    "Error: Invalid configuration data: 1 validation error for LtxTrainerConfig\n"
    "optimization.batchsize\n"
    "  Extra inputs are not permitted [type=extra_forbidden, input_value=2, input_type=int]\n"
)
PYDANTIC = (
    "Traceback (most recent call last):\n"
    "pydantic_core._pydantic_core.ValidationError: 2 validation errors for TrainerConfig\n"
    "lora.rank\n  Input should be a valid integer [type=int_type, input_value='x', input_type=str]\n"
)
ARGPARSE = (
    "usage: train.py [-h] [--disable-progress-bars] config\ntrain.py: error: unrecognized arguments: --foo\n"
)
ARGPARSE_REQUIRED = (
    "usage: train.py [-h] config\ntrain.py: error: the following arguments are required: config\n"
)
STEP_NAN = "Step 20/50 - Loss: nan, LR: 1.00e-04, Time/Step: 1.23s, Total Time: 0h 1m\n"
STEP_INF = "Step 40/50 - Loss: inf, LR: 1.00e-04, Time/Step: 1.23s, Total Time: 0h 1m\n"
STEP_OK = "Step 20/50 - Loss: 0.1234, LR: 1.00e-04, Time/Step: 1.23s, Total Time: 0h 1m\n"
LOSS_IS_NAN = "Traceback (most recent call last):\nRuntimeError: Loss is NaN at step 12\n"
STATS = (
    "📊 Training Statistics:\n - Total time: 12.3 minutes\n - Training speed: 0.43 steps/second\n"
    " - Samples/second: 0.43\n - Peak GPU memory: 45.68 GB\n"
)
CRASH = 'Traceback (most recent call last):\n  File "t.py", line 3\nValueError: bad shape\n'

MEASURED = TrialMetrics(step_time_s=1.0, samples_per_s=1.0)
NOTHING_READ = TrialMetrics()
NAN_METRICS = TrialMetrics(step_time_s=1.0, losses=[0.3, math.nan])

# ai-toolkit's banner for an OOM it caught and skipped (jobs/process/BaseSDTrainProcess.py:2640-2645
# @ 27a03a9), printed on stdout while its tqdm bar draws on stderr; the 4th in a row raises (:2636).
AITK_OOM_SKIP = (
    "\n################################################\n"
    "# OOM during training step, skipping batch 1/3 #\n"
    "################################################\n\n"
)
AITK_OOM_ABORT = (
    "Error running job: OOM during training step 3 times in a row, aborting training\n"
    "Traceback (most recent call last):\n"
    '  File "/ai-toolkit/run.py", line 147, in <module>\n'
    "RuntimeError: OOM during training step 3 times in a row, aborting training\n"
)


def case(
    rc: int | None = 1,
    sig: int | None = None,
    output: str = "",
    metrics: TrialMetrics | None = None,
    **flags: bool,
) -> dict[str, Any]:
    return {
        "returncode": rc,
        "signal": sig,
        "timed_out": flags.get("timed_out", False),
        "stalled": flags.get("stalled", False),
        "interrupted": flags.get("interrupted", False),
        "output": output,
        "metrics": metrics,
    }


TABLE = [
    # device OOM, every form
    ("torch full message", case(1, output=STATS[:0] + TORCH_OOM), Outcome.OOM),
    ("torch old message", case(1, output=TORCH_OOM_OLD), Outcome.OOM),
    ("accelerate rank prefixes", case(1, output=RANK0_OOM), Outcome.OOM),
    ("HIP", case(1, output=HIP_OOM), Outcome.OOM),
    ("XPU", case(1, output=XPU_OOM), Outcome.OOM),
    ("raw cudaMalloc", case(1, output=CUDA_ERROR_OOM), Outcome.OOM),
    ("cuBLAS alloc", case(1, output=CUBLAS), Outcome.OOM),
    ("cuDNN workspace", case(1, output=CUDNN), Outcome.OOM),
    ("NCCL", case(1, output=NCCL_OOM), Outcome.OOM),
    ("torch.cuda.OutOfMemoryError only", case(1, output="torch.cuda.OutOfMemoryError\n"), Outcome.OOM),
    ("OOM then hang, ended by runner", case(-15, output=TORCH_OOM, timed_out=True), Outcome.OOM),
    ("OOM beats stall", case(-9, output=TORCH_OOM, stalled=True), Outcome.OOM),
    ("OOM beats SIGKILL", case(-9, output=TORCH_OOM), Outcome.OOM),
    ("OOM caught by trainer, exit 0", case(0, output=TORCH_OOM, metrics=MEASURED), Outcome.OOM),
    ("ai-toolkit skipped a batch, ended by runner", case(-15, output=AITK_OOM_SKIP), Outcome.OOM),
    ("ai-toolkit skipped a batch, ran on", case(0, output=AITK_OOM_SKIP, metrics=MEASURED), Outcome.OOM),
    ("ai-toolkit aborts after 3", case(1, output=AITK_OOM_SKIP * 3 + AITK_OOM_ABORT), Outcome.OOM),
    # A clean run that prints the words is no OOM: the trainer did not fail (no failed exit, no
    # traceback, not on an exception's line).
    (
        "a file name with the words, clean exit",
        case(0, output="saved /data/CUDA out of memory.png\n" + STEP_OK + STATS, metrics=MEASURED),
        Outcome.OK,
    ),
    (
        "OutOfMemoryError named in a log line, clean exit",
        case(0, output="INFO hint: OutOfMemoryError means... lower the batch\n" + STATS, metrics=MEASURED),
        Outcome.OK,
    ),
    (
        "an exception's OOM line, caught, exit 0",
        case(0, output="torch.OutOfMemoryError: CUDA out of memory.\n" + STATS, metrics=MEASURED),
        Outcome.OOM,
    ),
    (
        "ai-toolkit banner quoted mid-line",
        case(
            0,
            output="tip: '# OOM during training step, skipping batch 1/3 #' means a skip\n",
            metrics=MEASURED,
        ),
        Outcome.OK,
    ),
    # host OOM
    ("CPU allocator", case(1, output=CPU_ALLOC), Outcome.HOST_OOM),
    ("CPU allocator, not enough", case(1, output=CPU_ALLOC_NOT_ENOUGH), Outcome.HOST_OOM),
    ("python MemoryError", case(1, output=PY_MEMORY_ERROR), Outcome.HOST_OOM),
    ("SIGKILL, no traceback", case(-9, output="INFO     Loading transformer...\n"), Outcome.HOST_OOM),
    ("SIGKILL as signal", case(None, 9, output=""), Outcome.HOST_OOM),
    ("137 through a shell", case(137, output="INFO loading\n"), Outcome.HOST_OOM),
    ("SIGKILL after a traceback", case(-9, output=CRASH), Outcome.CRASH),
    # limits
    ("timeout", case(-9, output="ready\n", timed_out=True), Outcome.TIMEOUT),
    ("timeout, trainer obeyed SIGTERM", case(-15, output="ready\n", timed_out=True), Outcome.TIMEOUT),
    ("stalled", case(-9, output="ready\n", stalled=True), Outcome.STALLED),
    (
        "interrupted beats everything",
        case(-15, output=TORCH_OOM, interrupted=True, timed_out=True),
        Outcome.INTERRUPTED,
    ),
    # config errors
    ("LTX-2 invalid config", case(1, output=LTX2_CONFIG_ERROR), Outcome.CONFIG_ERROR),
    ("pydantic traceback", case(1, output=PYDANTIC), Outcome.CONFIG_ERROR),
    ("argparse unrecognized", case(2, output=ARGPARSE), Outcome.CONFIG_ERROR),
    ("argparse required", case(2, output=ARGPARSE_REQUIRED), Outcome.CONFIG_ERROR),
    ("config text but exit 0", case(0, output=LTX2_CONFIG_ERROR, metrics=MEASURED), Outcome.OK),
    # NaN
    ("Loss: nan lines", case(0, output=STEP_OK + STEP_NAN + STATS), Outcome.NAN),
    ("Loss: inf lines", case(0, output=STEP_INF + STATS), Outcome.NAN),
    ("NaN in metrics", case(0, output=STATS, metrics=NAN_METRICS), Outcome.NAN),
    ("trainer raises on NaN", case(1, output=LOSS_IS_NAN), Outcome.NAN),
    ("NaN then hang", case(-9, output=STEP_NAN, timed_out=True), Outcome.NAN),
    # mentions memory but is not an OOM
    ("illegal memory access", case(1, output=ILLEGAL_ACCESS), Outcome.CRASH),
    ("memory usage line", case(0, output=MEMORY_USAGE + STATS), Outcome.OK),
    ("max_memory config key", case(0, output=MAX_MEMORY_KEY), Outcome.OK),
    ("Peak GPU memory in stats", case(0, output=STEP_OK + STATS, metrics=MEASURED), Outcome.OK),
    # crash and ok
    ("plain crash", case(1, output=CRASH), Outcome.CRASH),
    ("SIGSEGV", case(-11, output=""), Outcome.CRASH),
    ("SIGTERM from outside", case(-15, output="ready\n"), Outcome.CRASH),
    ("exit 0, nothing measured", case(0, output=STATS, metrics=NOTHING_READ), Outcome.CRASH),
    ("exit 0, metrics not given", case(0, output=STEP_OK + STATS), Outcome.OK),
    ("exit 0, measured", case(0, output=STEP_OK + STATS, metrics=MEASURED), Outcome.OK),
    ("exit status unknown", case(None, output=""), Outcome.CRASH),
]


@pytest.mark.parametrize(("name", "args", "expected"), TABLE, ids=[t[0] for t in TABLE])
def test_explain(name: str, args: dict[str, Any], expected: Outcome) -> None:
    verdict = explain(**args)
    assert verdict.outcome is expected
    assert verdict.reason and "\n" not in verdict.reason and len(verdict.reason) < 400


def test_reason_names_the_oom_figures_and_line() -> None:
    reason = explain(**case(1, output=RANK0_OOM)).reason
    assert "tried to allocate 512.0 MiB, 290.0 MiB free, of 79.25 GiB total" in reason
    assert "[rank" not in reason  # prefixes are stripped from the quoted line


@pytest.mark.parametrize(
    ("text", "tried", "free", "total"),
    [
        (TORCH_OOM, 2.0, 1.12, 139.81),
        (TORCH_OOM_OLD, 20 / 1024, 3.19 / 1024, 15.78),
        (RANK0_OOM, 0.5, 290 / 1024, 79.25),  # the last rank's message
        (HIP_OOM, 1.5, 0.98, 191.98),
        (XPU_OOM, 0.25, None, 15.11),
        (
            "CUDA out of memory. Tried to allocate 524288.00 KiB. GPU 0 has a total capacity of 24.00 GiB "
            "of which 1048576 bytes is free.",
            0.5,
            1 / 1024,
            24.0,
        ),
        (
            "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 TiB. GPU 3 has a\n"
            "[rank3]: total capacity of 79.25 GiB of which 12.00 MiB is free.",
            1024.0,
            12 / 1024,
            79.25,
        ),
    ],
)
def test_parse_oom(text: str, tried: float, free: float | None, total: float) -> None:
    details = parse_oom(text)
    assert details is not None
    assert details.tried_gb == pytest.approx(tried)
    assert details.total_gb == pytest.approx(total)
    if free is None:
        assert details.free_gb is None
    else:
        assert details.free_gb == pytest.approx(free)


@pytest.mark.parametrize("text", [CUBLAS, CUDA_ERROR_OOM, ILLEGAL_ACCESS, STATS, ""])
def test_parse_oom_without_figures(text: str) -> None:
    assert parse_oom(text) is None


def test_every_notable_text_passes_the_runners_keyword_prefilter() -> None:
    """The runner only runs the regexes on output holding a keyword; none of the table may slip by."""
    notable = re.compile(NOTABLE_SOURCE, re.M)
    hits = 0
    for _, args, _ in TABLE:
        for line in args["output"].splitlines():
            if notable.search(line):
                hits += 1
                assert any(k.decode() in line for k in NOTABLE_KEYWORDS), line
    assert hits > 20


@pytest.mark.process
def test_a_crash_under_a_launcher_names_the_childs_own_error(tmp_path: Path) -> None:
    """accelerate launch ends a failed child with its own ``CalledProcessError`` traceback
    (accelerate/commands/launch.py:1049-1051); the reason names the child's error before it."""
    import subprocess
    import sys

    pytest.importorskip("accelerate")
    script = tmp_path / "train.py"
    script.write_text("import PIL_not_installed_here\n")
    done = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1",
         "--mixed_precision", "no", "--dynamo_backend", "no", str(script)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "CalledProcessError" in output.strip().splitlines()[-1]
    got = explain(
        done.returncode, None, timed_out=False, stalled=False, interrupted=False, output=output, metrics=None
    )
    assert got.outcome is Outcome.CRASH
    assert got.reason.startswith(
        "crashed with exit code 1: ModuleNotFoundError: No module named 'PIL_not_installed_here'"
    )
    # Without a launcher the last line is the cause already.
    plain = "Traceback (most recent call last):\n  File 'x', line 1\nValueError: bad shape\n"
    assert explain(
        1, None, timed_out=False, stalled=False, interrupted=False, output=plain, metrics=None
    ).reason == ("crashed with exit code 1: ValueError: bad shape")


# torch.load's weights_only error as torch 2.13 raises it (torch/serialization.py:1609 raises
# ``pickle.UnpicklingError(_get_wo_message(str(e)))``; the message is built at :1446-1470, with a
# bold span, and ends in DOCS_MESSAGE, a prose line, at :1441-1444), printed for a checkpoint
# holding an ``argparse.Namespace`` (pytorch/examples' scripts save their args so).
WEIGHTS_ONLY = (
    "Traceback (most recent call last):\n"
    '  File "/tmp/ex/imagenet/main.py", line 4, in <module>\n'
    '    torch.load("/tmp/wo.pt")\n'
    '  File "/venv/lib/python3.11/site-packages/torch/serialization.py", line 1609, in load\n'
    "    raise pickle.UnpicklingError(_get_wo_message(str(e))) from None\n"
    "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you "
    "have two options, \x1b[1mdo those steps only if you trust the source of the checkpoint\x1b[0m. \n"
    "\t(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument in `torch.load` "
    "from `False` to `True`. Re-running `torch.load` with `weights_only` set to `False` will likely "
    "succeed, but it can result in arbitrary code execution. Do it only if you got the file from a "
    "trusted source.\n"
    "\t(2) Alternatively, to load with `weights_only=True` please check the recommended steps in the "
    "following error message.\n"
    "\tWeightsUnpickler error: Unsupported global: GLOBAL argparse.Namespace was not an allowed global "
    "by default. Please use `torch.serialization.add_safe_globals([argparse.Namespace])` or the "
    "`torch.serialization.safe_globals([argparse.Namespace])` context manager to allowlist this global "
    "if you trust this class/function.\n"
    "\n"
    "Check the documentation of torch.load to learn more about types accepted by default with "
    "weights_only https://pytorch.org/docs/stable/generated/torch.load.html.\n"
)
CHAINED = (
    "Traceback (most recent call last):\n  File 'a.py', line 1\nKeyError: 'x'\n\n"
    "During handling of the above exception, another exception occurred:\n\n"
    "Traceback (most recent call last):\n  File 'a.py', line 3\n"
    "ValueError: no x\nsecond line of its message\n"
)
LAUNCHER = (
    "Traceback (most recent call last):\n  File 'train.py', line 1\n"
    "ModuleNotFoundError: No module named 'PIL'\n"
    "Traceback (most recent call last):\n  File 'accelerate/commands/launch.py', line 1051\n"
    "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 1.\n"
)


@pytest.mark.parametrize(
    ("output", "line"),
    [
        (WEIGHTS_ONLY, "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, "
         "to do so you have two options, do those steps only if you trust the source of the checkpoint."),
        (CRASH, "ValueError: bad shape"),
        (CHAINED, "ValueError: no x"),  # the last traceback's, not the message's last line
        ("[rank0]: Traceback (most recent call last):\n[rank0]:   File 'x', line 1\n"
         "[rank0]: RuntimeError: boom\n[rank0]: more of it\n", "RuntimeError: boom"),
        (LAUNCHER, "ModuleNotFoundError: No module named 'PIL' (then the launcher: "
         "subprocess.CalledProcessError: Command '['python', 'train...)"),
        ("step 1\nSegmentation fault (core dumped)\n", "Segmentation fault (core dumped)"),  # no traceback
        ("Traceback (most recent call last):\n  File 'x'\n", "File 'x'"),  # cut short: the last line
        (  # a traceback logged, the run went on and ended otherwise: its last line, not the old error
            "Traceback (most recent call last):\n  File 'x'\nKeyError: 'cache'\n"
            + "".join(f"step {i} loss 0.5\n" for i in range(60)) + "terminate called after throwing an instance\n",
            "terminate called after throwing an instance",
        ),
    ],
    ids=["torch.load weights_only", "plain", "chained", "rank prefix", "launcher", "no traceback", "cut", "logged"],
)  # fmt: skip
def test_a_crash_names_the_last_tracebacks_exception_line(output: str, line: str) -> None:
    assert explain(**case(1, output=output)).reason == f"crashed with exit code 1: {line}"


def test_a_clean_run_with_no_speed_says_what_autotune_reads_and_how_to_give_it() -> None:
    """It exited 0 and its log is clean: "fix what the log shows" had nothing to point at."""
    got = explain(**case(0, output="epoch 1 done\n", metrics=NOTHING_READ))
    assert got.outcome is Outcome.CRASH  # the stored outcome name stays (the study's schema)
    for said in ("finished", "optimizer steps", "backward()", "AUTOTUNE_METRICS_FILE", "step_time_s",
                 "docs/trainers/command.md"):  # fmt: skip
        assert said in got.reason
    assert "could be read" not in got.reason and len(got.reason) <= 300
