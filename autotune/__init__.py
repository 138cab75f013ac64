"""autotune: empirical autotune sweeps for GPU fine-tuning.

The orchestrator side (this package) never imports torch: trainers run in their
own environments, as subprocesses. Code that runs inside a trial lives in ``trials``.
"""

__version__ = "0.1.0"
