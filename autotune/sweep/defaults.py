"""The sweep's default settings, in a module that imports nothing.

The command line shows them in ``--help`` while it builds its parser; keeping them
here means ``autotune --help`` does not import the sweep engine (and Optuna).
"""

from __future__ import annotations

#: Default fraction of the card kept free. Why 10 %: a short trial sees neither
#: validation nor checkpoint saving nor the slow growth of fragmentation (an A100
#: 80 GB run of the LTX-2 trainer hit OOM only after 2000 steps), the trainer's own
#: peak is sampled sparsely (nvidia-smi every 200 steps), and peers aim at 80-95 %
#: of the card (OTX 80-85 %, Lightning a 5 % margin in-process). 10 % leaves 8 GB
#: on an 80 GB card and ~4.8 GB on a 48 GB one, about one activation set of a
#: batch step; it rejects what sits at the edge, like the 5090 at 31 of 32 GB.
DEFAULT_HEADROOM = 0.10
DEFAULT_MAX_BATCH_SIZE = 16
DEFAULT_STEPS = 50  # LTX-2's own autotune runs 50-step trials; Step lines come every 20 steps
DEFAULT_TRIAL_TIMEOUT_S = 30 * 60.0  # loading a 22B model takes minutes
DEFAULT_STALL_TIMEOUT_S = 10 * 60.0
