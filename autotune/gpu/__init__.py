"""The card: NVML, the probe, the VRAM tiers, draining between trials."""
