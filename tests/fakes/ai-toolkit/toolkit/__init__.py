"""The fake ai-toolkit checkout's package (the real one holds the trainer's modules)."""
