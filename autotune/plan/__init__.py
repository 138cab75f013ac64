"""`autotune plan`: the trainer's shipped baseline for a card's tier, with only its paths patched.

``baseline`` picks and renders the plan; ``files`` finds the trainer's config file and patches its paths.
"""
