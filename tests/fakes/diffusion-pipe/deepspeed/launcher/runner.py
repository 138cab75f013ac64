"""A fake of DeepSpeed's launcher (``deepspeed`` = ``python -m deepspeed.launcher.runner``, bin/ds @
38327e0): takes ``--num_gpus=N`` and the script, and runs the script once per GPU with
``--local_rank=R`` in front of its own arguments (deepspeed/launcher/launch.py passes it so), then
exits with the script's exit status. No torch, no distributed set-up: one process per rank here,
and a single rank replaces the launcher (exec) to keep the tests' trials cheap."""

import argparse
import os
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser(prog="deepspeed")
    parser.add_argument("--num_gpus", "--num_accelerators", type=int, default=-1)  # runner.py:104
    parser.add_argument("--master_port", type=int, default=29500)
    parser.add_argument("user_script", type=str)
    parser.add_argument("user_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    ranks = max(1, args.num_gpus)
    if ranks == 1:
        env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
        argv = [sys.executable, "-u", args.user_script, "--local_rank=0", *args.user_args]
        os.execve(sys.executable, argv, env)
    procs = []
    for rank in range(ranks):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(ranks)}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-u", args.user_script, f"--local_rank={rank}", *args.user_args], env=env
            )
        )
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
