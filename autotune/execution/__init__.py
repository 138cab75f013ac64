"""Running one trial as a process.

``runner`` (launch, stream the output, time out, notice a stall, stop, report the started process
through ``on_start``), ``proctree`` (a trial's process family, its environment mark, and the one
way to kill it; the orchestrator as subreaper of its orphans), ``cgroup`` (the trial's own
cgroup v2 where the host allows one), ``monitor`` (NVML sampling of the family), ``launch`` (what to run, where, with
which environment).
"""
