"""Trainer config files: YAML files read with line numbers and edited in place, the knob files, the LTX-2 key schema."""
