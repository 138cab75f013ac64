"""The sweep, composed (the model: Optuna's ``Study`` -> ``_optimize``/``_tell``, Lightning's tuner).

- ``api``: the entry points for the CLI (``run_sweep``, ``run_worker``) and the strategy seam.
- ``options``: what a sweep is run with (``SweepOptions``), its defaults and its ``SweepResult``.
- ``setup``: the options resolved once into a frozen ``SweepPlan`` (trainer, baseline, card, space).
- ``session``: one run: setup, one search loop per card, signals, then the conclusion.
- ``loop``: one card's search loop: baseline first, limits, the strategy's picks.
- ``scheduler``: what may start next: the study alone, or a study shared through claims.
- ``executor``: one trial, start to end, on one card.
- ``measure``, ``history``, ``naming``: a trial's measurements, the strategy's view, small rules.
- ``conclude``: the winner, its confirmation, what was ruled out, the reports, the result.
- ``parallel``, ``progress``: the cards of one machine, the live view.

Kept light (no imports here): the CLI reads ``options`` while it builds its parser.
"""
