"""Running one trial as a process.

``runner`` (launch, stream the output, time out, notice a stall, stop, report the started process
through ``on_start``), ``proctree`` (a trial's process family, its environment mark, and the one
way to kill it), ``monitor`` (NVML sampling of the family), ``launch`` (what to run, where, with
which environment).
"""
