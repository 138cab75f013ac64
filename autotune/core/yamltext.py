"""YAML text to plain data, safely: the one parser every config, knob file and table goes through.

Pure (text in, data out): the core's knob space parses with it, and ``autotune.config.yamlconf``
reads files and edits them round-trip on top of it.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from autotune.errors import ConfigError


class _SafeUniqueLoader(yaml.SafeLoader):
    """The safe loader, refusing a key written twice in one mapping.

    PyYAML keeps the last of two equal keys and ruamel refuses them with a traceback;
    a user who wrote ``steps:`` twice meant one of them, so say which line repeats it.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            try:
                key = self.construct_object(key_node, deep=deep)
                hash(key)
            except (yaml.constructor.ConstructorError, TypeError):
                continue  # the base class reports unhashable or bad keys itself
            if key in seen:
                first = seen[key].start_mark
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first written on line {first.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, source: str = "<config>") -> Any:
    """Parse ``text`` with the safe loader; a syntax error names ``source``, line and column.

    Only plain data is built: tags such as ``!!python/object`` are refused, as are
    keys written twice in one mapping.
    """
    try:
        return yaml.load(text, Loader=_SafeUniqueLoader)
    except yaml.constructor.ConstructorError as exc:
        # The safe loader builds plain data only: a ``!!python/object`` tag (or any custom tag)
        # would run code or build objects with an unsafe loader, so it is refused, by name.
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        if (exc.problem or "").startswith("duplicate key"):
            raise ConfigError(
                f"{where}: {exc.problem}; a key may appear once per section: keep the one you mean "
                "and delete the other"
            ) from None
        tag = re.search(r"tag '([^']*)'", exc.problem or "")
        what = f"the tag {tag.group(1).replace('tag:yaml.org,2002:', '!!')}" if tag else "a tag"
        raise ConfigError(
            f"{where}: {what} is not allowed: autotune reads YAML with a safe loader (plain "
            "mappings, lists, strings, numbers, booleans and null only). Remove the tag and write the "
            "value as plain data."
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{where}: YAML syntax error: {problem}. Fix the file and run again.") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: YAML error: {exc}") from None
