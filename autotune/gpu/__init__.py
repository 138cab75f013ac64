"""The card: ``nvml`` (the driver, behind one small seam that tests fake), ``probe`` (the GPUs this
process may use, as CUDA numbers them), ``tiers`` (a card's VRAM tier, from ``configs/tiers.yaml``),
``drain`` (waiting for the card to empty between trials)."""
