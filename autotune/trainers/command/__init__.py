"""Any trainer, from a command template (``--cmd``): its adapter."""
