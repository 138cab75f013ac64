"""A fake trainer that really runs and misbehaves on command, for the runner's tests.

    python fake_trainer.py MODE [--oom-text KIND] [--then exit|hang] [--mb N] [--steps N]

Modes: succeed, oom, host-hog, hang, hang-ignore-term, grandchild, daemon, escaped-hog,
sigkill-self, nan, config-error, garbage-metrics, flood, crash, argparse-error, tick. It prints what the
LTX-2 trainer prints (Step lines, the statistics block, its error texts) and
announces pids as ``PID name=N`` lines so tests can check they are gone.
Standalone on purpose: it imports nothing from autotune.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

OOM_TEXTS = {
    "torch": (
        "Traceback (most recent call last):\n"
        '  File "/app/packages/ltx-trainer/scripts/train.py", line 42, in <module>\n'
        "    trainer.train()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 139.81 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process "
        "has 138.68 GiB memory in use. Of the allocated memory 135.20 GiB is allocated by PyTorch, and "
        "2.31 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
        "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
    ),
    "rank0": (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/app/scripts/train.py", line 42, in <module>\n'
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a "
        "total capacity of 79.25 GiB of which 301.88 MiB is free.\n"
    ),
    "hip": "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 191.98 GiB of which 0.98 GiB is free.\n",
    "xpu": "RuntimeError: XPU out of memory. Tried to allocate 256.00 MiB (GPU 0; 15.11 GiB total capacity; 14.68 GiB already allocated; 14.89 GiB reserved in total by PyTorch)\n",
    "cuda-error": "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call\n",
    "cublas": "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n",
    "cudnn": "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.\n",
    "cpu-alloc": "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 85899345920 bytes. Error code 12 (Cannot allocate memory)\n",
}
HOST_OOM_KINDS = {"cpu-alloc"}


def step_lines(steps: int, loss: str) -> None:
    for step in range(1, steps + 1):
        if step % 20 == 0 or step == steps:
            print(
                f"Step {step}/{steps} - Loss: {loss}, LR: 1.00e-04, Time/Step: 0.01s, Total Time: 0h 0m",
                flush=True,
            )


def statistics(samples: str = "4.00", peak: str = "12.34") -> None:
    print("📊 Training Statistics:")
    print(" - Total time: 0.1 minutes")
    print(" - Training speed: 4.00 steps/second")
    print(f" - Samples/second: {samples}")
    print(f" - Peak GPU memory: {peak} GB", flush=True)


def write_metrics(payload: str) -> None:
    path = os.environ.get("AUTOTUNE_METRICS_FILE")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(payload)


def hang() -> None:
    while True:
        time.sleep(3600)


def announce(name: str, pid: int) -> None:
    print(f"PID {name}={pid}", flush=True)


#: The escaped daemon's program: it ignores SIGTERM, writes its pid to ``argv[2]`` (a pipe), then
#: holds ``argv[1]`` MB of touched host RAM and says ``ready`` there.
DAEMON_CODE = (
    "import os,signal,sys,time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "os.write(int(sys.argv[2]), b'%d\\n' % os.getpid())\n"
    "held = bytearray(int(sys.argv[1]) * 1024 * 1024)\n"
    "for i in range(0, len(held), 4096): held[i] = 1\n"
    "os.write(int(sys.argv[2]), b'ready\\n'); os.close(int(sys.argv[2]))\n"
    "while True: time.sleep(3600)\n"
)


def escape_daemon(mb: int) -> None:
    """The classic daemon: fork, ``setsid``, fork again, the middle one exits at once (so the
    daemon is an orphan that no tree walk from the trainer reaches), then ``execve`` with an
    EMPTY environment (no ``AUTOTUNE_TRIAL_MARK`` in /proc/PID/environ) and stdio on /dev/null.
    Announces the daemon's pid, and returns once it holds its memory."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.close(read_end)
            os.set_inheritable(write_end, True)
            os.execve(sys.executable, [sys.executable, "-c", DAEMON_CODE, str(mb), str(write_end)], {})
        os._exit(0)
    os.close(write_end)
    os.waitpid(middle, 0)
    with os.fdopen(read_end) as ready:
        announce("daemon", int(ready.readline()))
        ready.readline()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("--oom-text", default="torch", choices=sorted(OOM_TEXTS))
    ap.add_argument("--then", default="exit", choices=["exit", "hang"])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (any mode)")
    ap.add_argument("--after-mb", type=int, default=0, help="oom: MB of chatter printed after the OOM text")
    ap.add_argument("--seconds", type=float, default=1.5, help="tick: how long to keep printing")
    ap.add_argument("--every", type=float, default=0.1, help="tick: seconds between lines")
    args = ap.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    announce("trainer", os.getpid())

    if args.mode == "succeed":
        print("INFO     Loading model...", flush=True)
        step_lines(args.steps, "0.1234")
        write_metrics(json.dumps({"step_time_s": 0.01, "peak_vram_gb": 12.34, "samples_per_s": 4.0}))
        statistics()
        return 0
    if args.mode == "oom":
        step_lines(1, "0.1234")
        sys.stderr.write(OOM_TEXTS[args.oom_text])
        sys.stderr.flush()
        for _ in range(args.after_mb):  # e.g. a teardown that logs a lot after the OOM
            sys.stdout.write(("INFO     cleaning up " + "y" * 78 + "\n") * 10_000)
        sys.stdout.flush()
        if args.then == "hang":  # like a trainer whose DataLoader workers or collectives hang after OOM
            hang()
        return 1
    if args.mode == "host-hog":  # block swap gone wrong: --mb of host RAM held (touched), then a hang
        held = bytearray(args.mb * 1024 * 1024)
        for i in range(0, len(held), 4096):
            held[i] = 1
        print(f"holding {args.mb} MB of host RAM", flush=True)
        hang()
    if args.mode == "hang":
        print("ready", flush=True)
        hang()
    if args.mode == "hang-ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        hang()
    if args.mode == "grandchild":
        # A worker in the trainer's group, and a grandchild that leaves the session and ignores SIGTERM.
        code = (
            "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(3600)"
        )
        worker = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(3600)"])
        grand = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        announce("worker", worker.pid)
        announce("grandchild", grand.pid)
        print("ready", flush=True)
        if args.then == "hang":
            hang()
        statistics()
        return 0
    if args.mode == "daemon":  # leaves a daemon behind and exits cleanly
        escape_daemon(0)
        statistics()
        return 0
    if args.mode == "escaped-hog":  # an escaped daemon holds --mb of host RAM while the trainer runs on
        escape_daemon(args.mb)
        print("ready", flush=True)
        hang()
    if args.mode == "sigkill-self":
        print("INFO     Loading transformer on CPU...", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if args.mode == "nan":
        step_lines(args.steps, "nan")
        write_metrics(json.dumps({"step_time_s": 0.01, "loss": float("nan")}))
        statistics()
        return 0
    if args.mode == "config-error":
        print(
            "Error: Invalid configuration data: 1 validation error for LtxTrainerConfig\n"
            "optimization.batchsize\n"
            "  Extra inputs are not permitted [type=extra_forbidden, input_value=2, input_type=int]\n"
            "    For further information visit https://errors.pydantic.dev/2.11/v/extra_forbidden",
            flush=True,
        )
        return 1
    if args.mode == "argparse-error":
        ap.error("unrecognized arguments: --batch-size 4")
    if args.mode == "garbage-metrics":
        step_lines(args.steps, "0.1234")
        write_metrics("{not json at all")
        statistics(samples="fast", peak="lots")
        return 0
    if args.mode == "flood":
        line = b"INFO     " + b"x" * 90 + b"\n"  # 100 bytes a line
        block = line * 10_000  # ~1 MB
        out = sys.stdout.buffer
        for _ in range(args.mb):
            out.write(block)
        out.flush()
        sys.stderr.write("a little on stderr too\n")
        statistics()
        return 0
    if args.mode == "tick":  # steady output, slower than a stall limit would fire on silence
        end = time.monotonic() + args.seconds
        step = 0
        while time.monotonic() < end:
            step += 1
            print(f"tick {step}", flush=True)
            time.sleep(args.every)
        statistics()
        return 0
    if args.mode == "crash":
        step_lines(1, "0.1234")
        raise ValueError("something unrelated to memory went wrong")
    print(f"fake_trainer: unknown mode {args.mode!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
