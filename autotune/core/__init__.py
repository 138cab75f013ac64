"""The pure core: the search space, the strategy, outcomes, metrics, timing, units. No I/O."""
