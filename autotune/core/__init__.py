"""The pure core: no I/O, no Optuna, no processes (``tests/test_architecture.py`` checks it).

- ``space``: knobs and candidates (the null/``none`` rule once); ``yamltext``: the safe YAML parser.
- ``strategy``: what to measure next, composed of ``grid`` (the candidates and their order),
  ``knowledge`` (what a history says), ``memory`` (dominance and the memory line) and ``bounds``
  (how fast an unmeasured candidate could be).
- ``verdict``: what fits, the judged peak, throughput and the winner, decided here alone;
  ``record``: ``TrialRecord``, the only code that knows the trial attr keys.
- ``outcome``: how a trial ended, from real error texts; ``metrics``, ``timing``, ``units``.
"""
