"""Trainer config files: ``yamlconf`` and ``yamledit`` (read with line numbers, edited in place in any
valid YAML style, every edit checked), ``knobs`` (the knob files' only reader), ``schema`` (LTX-2 keys)."""
