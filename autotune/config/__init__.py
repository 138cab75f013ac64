"""Trainer config files: YAML reading and editing, the LTX-2 key schema, the tier's baseline plan."""
