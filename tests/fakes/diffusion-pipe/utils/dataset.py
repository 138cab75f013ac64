"""Marks this folder as a diffusion-pipe checkout (the adapter looks for train.py and utils/dataset.py)."""
