"""Sana and other diffusers-family command-line-flag trainers: their adapter."""
