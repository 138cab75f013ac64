"""The Optuna study and everything stored beside it.

``urls`` (where a study lives, how it is shown), ``sqlite`` and ``postgres`` (each kind's care),
``storage`` (the one way to open a database), ``study`` (``SweepStudy``: autotune's rules on an
ordinary Optuna study), ``settings`` (is it the same sweep?), ``identity`` (who runs a trial or
holds a claim), ``claims`` and ``workers`` (several workers on one study), ``recovery`` (a dead
sweep's or worker's trials), and ``optuna_private`` (every reach into Optuna's internals).
"""
