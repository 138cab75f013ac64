"""YAML text to plain data, safely: the one parser every config, knob file and table goes through.

Pure (text in, data out): the core's knob space parses with it, and ``autotune.config.yamlconf``
reads files and edits them round-trip on top of it.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from autotune.errors import ConfigError

#: The most a config file may hold. A trainer's config is a few KB (LTX-2's largest ships at
#: 17 KB); past this a file is data or generated text, and parsing it would stall every trial.
MAX_CONFIG_BYTES = 1024 * 1024
#: The most nodes a YAML document may expand to, its aliases (``*name``) followed. A real config
#: has a few hundred; a "billion laughs" file nests aliases to expand to billions, which every
#: walk of the data (validation, hashing, rendering) would then pay for.
MAX_YAML_NODES = 100_000


def check_config_size(size: int, source: str) -> None:
    """Refuse a config of more than ``MAX_CONFIG_BYTES`` (``size`` in bytes or characters)."""
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{source} is {'over ' if size == MAX_CONFIG_BYTES + 1 else ''}{_size_text(size)}, "
            f"more than a config may be ({_size_text(MAX_CONFIG_BYTES)}; a trainer's config is a few KB): "
            "give the trainer's config file itself, not a data or generated file"
        )


def _size_text(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MB" if size >= 1024 * 1024 else f"{size / 1024:.0f} KB"


def _expanded_nodes(root: yaml.Node, limit: int) -> tuple[int, yaml.Node | None]:
    """How many nodes ``root`` expands to with every alias followed (stops counting past
    ``limit``), and the first alias target whose expansion passed it. Each distinct node is
    sized once, so this costs the document's written size, not its expanded one."""
    sizes: dict[int, int] = {}
    culprit: list[yaml.Node] = []

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        sizes[key] = 1  # a recursive alias (``&a [*a]``) counts once; PyYAML refuses it itself
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children: list[yaml.Node] = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > limit:
                if not culprit:
                    culprit.append(child)
                total = limit + 1
                break
        sizes[key] = total
        return total

    return size(root), (culprit[0] if culprit else None)


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
    keys written twice in one mapping, texts past ``MAX_CONFIG_BYTES`` and documents whose
    aliases expand past ``MAX_YAML_NODES`` nodes.
    """
    check_config_size(len(text), source)
    loader = _SafeUniqueLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        total, culprit = _expanded_nodes(node, MAX_YAML_NODES)
        if total > MAX_YAML_NODES:
            mark = (culprit or node).start_mark
            raise ConfigError(
                f"{source}:{mark.line + 1}:{mark.column + 1}: its aliases (*name) expand to more than "
                f"{MAX_YAML_NODES:,} values (a config has a few hundred): nested aliases that multiply "
                "(a 'billion laughs' file) are refused; write the values out, or use fewer aliases"
            )
        return loader.construct_document(node)
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
    finally:
        loader.dispose()
