"""TOML configs edited in place: only the keys a candidate changes move, comments and layout kept.

musubi-tuner's dataset config and diffusion-pipe's whole config are TOML. ``tomlkit`` keeps a
document's comments, key order and spelling on a round trip; this module wraps it so every
caller reads the same errors (file and line named) and edits by dotted key
(``model.blocks_to_swap``). After each edit the document is read back and checked, so an edit
that came out wrong is our bug (``ConfigEditError``), never a silently different config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import String, StringType
from tomlkit.toml_document import TOMLDocument

from autotune.core.yamltext import check_config_size
from autotune.errors import ConfigEditError, ConfigError

__all__ = ["TomlConfig", "load_toml_data"]


def load_toml_data(text: str, source: str) -> dict[str, Any]:
    """Plain data of a TOML text; a malformed file is a ``ConfigError`` that names ``source`` and
    the line (tomlkit, not ``tomllib``: Python 3.10 has no ``tomllib``)."""
    check_config_size(len(text), source)
    try:
        return dict(tomlkit.parse(text).unwrap())
    except TOMLKitError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}. Fix the file and run again.") from None


class TomlConfig:
    """One TOML document: read by dotted key, edited in place, written back with its comments."""

    def __init__(self, text: str, source: str = "<toml>") -> None:
        self.source = source
        check_config_size(len(text), source)
        try:
            self._doc: TOMLDocument = tomlkit.parse(text)
        except TOMLKitError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}. Fix the file and run again.") from None

    @property
    def data(self) -> dict[str, Any]:
        """The document as plain Python data."""
        return load_toml_data(self.text, self.source)

    @property
    def text(self) -> str:
        return tomlkit.dumps(self._doc)

    def get(self, dotted: str, default: Any = None) -> Any:
        """The value at ``dotted`` (``a.b.c``) as plain data, or ``default`` when a part is missing."""
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    def set(self, dotted: str, value: Any) -> None:
        """Set ``dotted`` to ``value``; missing tables on the way are created. ``None`` removes the key."""
        *parents, last = dotted.split(".")
        node: Any = self._doc
        for part in parents:
            if part not in node:
                if value is None:
                    return
                node[part] = tomlkit.table()
            node = node[part]
            if not isinstance(node, Mapping):
                raise ConfigError(f"{self.source}: {dotted}: {part!r} is not a table")
        if value is None:
            if last in node:
                del node[last]
        else:
            node[last] = _styled_like(node.get(last), value)
        got = self.get(dotted)
        if got != value and not (value is None and got is None):
            raise ConfigEditError(f"{self.source}: setting {dotted} = {value!r} read back {got!r}")

    def table_list(self, dotted: str) -> list[Any]:
        """The array of tables at ``dotted`` (``[[directory]]``) as live tomlkit tables, to edit in place."""
        node: Any = self._doc
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return []
            node = node[part]
        return list(node) if isinstance(node, list) else []


def _styled_like(old: Any, value: Any) -> Any:
    """``value`` as a string in the quoting the key had (``'literal'`` stays literal where it can):
    the user's file keeps its own style, and the text does not depend on tomlkit's version (0.15.3
    keeps a replaced string's style, 0.15.2 wrote every new one in double quotes)."""
    if not isinstance(value, str):
        return value
    literal = isinstance(old, String) and old.type == StringType.SLL
    if literal and ("'" in value or "\n" in value or any(ord(ch) < 32 for ch in value)):
        literal = False  # a literal string cannot hold these
    return tomlkit.string(value, literal=literal)
