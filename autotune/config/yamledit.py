"""The exact parts of config editing: where a value's text lies, what the edit must produce, and
the ruamel round trip used when a line edit cannot be exact.

``RoundTripConfig`` (``yamlconf``) edits lines; this module gives it the node spans of flow
collections (``{a: 1, b: 2}``, one line or many), the data an edit must yield (checked after
every edit), the spelling a written-back value keeps (``none``, ``True``, quotes), and the
full round trip that keeps comments when a line edit would not be exact (aliases, merges).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString
from ruamel.yaml.util import load_yaml_guess_indent

from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigEditError

_MERGE = "tag:yaml.org,2002:merge"


def flow(value: Any) -> str:
    """One-line YAML for a value (``null``, ``true``, ``4``, ``"text"``, ``[]``)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


def keeps_spelling(old: Any, new: Any) -> bool:
    """Whether ``old``'s text already says ``new``: then the file's spelling stays (``none``, ``~``,
    ``True``). The study stores YAML null as ``none``, so a ``none`` the user wrote is null to us."""
    if type(old) is type(new) and old == new:
        return True
    return new is None and isinstance(old, str) and old.strip().lower() == "none"


def styled(token: str, value: Any) -> str:
    """``value`` written in the style of the token it replaces: the same quotes, the same ``True``."""
    rendered = flow(value)
    if isinstance(value, bool) and token.strip().lower() in ("true", "false"):
        word = token.strip()
        new = "true" if value else "false"
        if word.isupper():
            return new.upper()
        return new.capitalize() if word[:1].isupper() else new
    if isinstance(value, str) and token[:1] == '"':
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and token[:1] == "'" and value.isprintable():
        return "'" + value.replace("'", "''") + "'"
    return rendered


def unshared(data: Any) -> Any:
    """A deep copy in which no two places share a container (a YAML alias shares them)."""
    if isinstance(data, Mapping):
        return {k: unshared(v) for k, v in data.items()}
    if isinstance(data, list):
        return [unshared(v) for v in data]
    return data


def item(node: Any, part: str) -> Any:
    """``node[int(part)]`` when ``node`` is a list and ``part`` names one of its items (a dotted
    path reaches into a list by index: ``config.process.0.train``), else ``None``."""
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return None


def intended(plain: Any, edits: Mapping[str, Any]) -> dict[str, Any]:
    """The data the file must hold after ``edits``: every other leaf as it was."""
    out = unshared(plain) if isinstance(plain, Mapping) else {}
    for dotted, value in edits.items():
        node: Any = out
        parts = dotted.split(".")
        for i, part in enumerate(parts[:-1]):
            child = item(node, part) if isinstance(node, list) else node.get(part)
            indexed = i + 2 < len(parts) and isinstance(item(child, parts[i + 1]), dict)
            if not isinstance(child, dict) and not indexed:
                child = {}
                if isinstance(node, list):
                    node[int(part)] = child
                else:
                    node[part] = child
            node = child
        node[parts[-1]] = unshared(value)
    return out


def matches(text: str, want: Any) -> bool:
    """Whether ``text`` parses to exactly ``want`` (types included: ``True`` is not ``1``)."""
    try:
        got = load_yaml(text)
    except Exception:  # any failure means our edit was not exact
        return False
    return _same(got, want)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


# --- where a value's text lies (PyYAML's node marks) ---------------------------------------------


class _Composer(yaml.SafeLoader):
    """PyYAML's composer, noting where each alias (``*name``) is written: an alias composes to its
    anchor's node, whose marks are the anchor's place, not the alias's."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases: dict[tuple[int, int], tuple[int, int]] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self.aliases[(id(parent), id(index))] = (event.start_mark.index, event.end_mark.index)
        return super().compose_node(parent, index)


def compose(text: str) -> tuple[yaml.Node | None, dict[tuple[int, int], tuple[int, int]]]:
    """The node tree of ``text``, and the span of each alias by ``(id(mapping), id(key node))``."""
    loader = _Composer(text)
    try:
        return loader.get_single_node(), loader.aliases
    finally:
        loader.dispose()


def own_pair(mapping: yaml.Node, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    """The ``(key, value)`` nodes ``mapping`` writes itself for ``key`` (not one merged in)."""
    if not isinstance(mapping, yaml.MappingNode):
        return None
    for k, v in mapping.value:
        if isinstance(k, yaml.ScalarNode) and k.tag != _MERGE and k.value == key:
            return k, v
    return None


def section_path(root: yaml.Node | None, parts: list[str]) -> list[yaml.Node]:
    """The mapping nodes along ``parts`` that the file writes itself (stops where one is missing);
    a list on the way is passed by an index part (the list and its item are both on the path)."""
    nodes: list[yaml.Node] = [root] if isinstance(root, yaml.MappingNode) else []
    for part in parts:
        last = nodes[-1] if nodes else None
        if isinstance(last, yaml.SequenceNode):
            child = item(last.value, part)
            if not isinstance(child, yaml.MappingNode):
                break
            nodes.append(child)
            continue
        pair = own_pair(last, part) if last is not None else None
        if pair is None or not isinstance(pair[1], (yaml.MappingNode, yaml.SequenceNode)):
            break
        nodes.append(pair[1])
    while nodes and isinstance(nodes[-1], yaml.SequenceNode):  # a path ends at a mapping
        nodes.pop()
    return nodes


def is_plain_node(text: str, node: yaml.Node, shared: set[int]) -> bool:
    """A node a span edit may replace: written here once (no anchor, alias or tag on it)."""
    return id(node) not in shared and text[node.start_mark.index : node.start_mark.index + 1] not in (
        "&",
        "*",
        "!",
    )


def shared_nodes(root: yaml.Node | None) -> set[int]:
    """Ids of nodes reached more than once (an anchor with aliases): editing them edits every use."""
    seen: set[int] = set()
    shared: set[int] = set()

    def walk(node: yaml.Node) -> None:
        if id(node) in seen:
            shared.add(id(node))
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                walk(k)
                walk(v)
        elif isinstance(node, yaml.SequenceNode):
            for v in node.value:
                walk(v)

    if root is not None:
        walk(root)
    return shared


def alias_paths(text: str) -> set[tuple[str, ...]]:
    """The key paths whose value is written as an alias (``key: *name``)."""
    root, aliases = compose(text)
    out: set[tuple[str, ...]] = set()

    def walk(node: yaml.Node | None, prefix: tuple[str, ...]) -> None:
        if not isinstance(node, yaml.MappingNode):
            return
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                continue
            path = (*prefix, k.value)
            if (id(node), id(k)) in aliases:
                out.add(path)
            else:
                walk(v, path)

    walk(root, ())
    return out


def flow_insert(text: str, mapping: yaml.Node, missing: list[str], value: Any) -> str:
    """``text`` with ``missing`` (nested keys) added just before a flow mapping's closing brace."""
    nested: Any = value
    for part in reversed(missing[1:]):
        nested = {part: nested}
    entry = f"{flow(missing[0])}: {flow(nested)}"
    close = mapping.end_mark.index - 1
    if text[close] != "}":
        raise ConfigEditError("not a flow mapping")
    before = text[:close].rstrip()
    sep = "" if before.endswith(("{", ",")) else ","
    if "\n" in text[len(before) : close]:  # the brace on a line of its own: the entry gets one too
        last = before[before.rfind("\n") + 1 :]
        indent = len(last) - len(last.lstrip()) + (2 if before.endswith("{") else 0)
        return before + sep + "\n" + " " * indent + entry + text[len(before) : close] + text[close:]
    space = "" if before.endswith("{") else " "
    return before + sep + space + entry + text[len(before) : close] + text[close:]


# --- the round trip, when a line edit cannot be exact --------------------------------------------


def ruamel_rewrite(text: str, edits: Mapping[str, Any], want: Any) -> str:
    """``text`` loaded and dumped by ruamel's round trip (comments and quotes kept) with ``edits`` set.

    An anchored value edited at one place would change at every alias and merge too: the places
    that must not change get their old value written explicitly, and the result is checked.
    """
    _, indent, offset = load_yaml_guess_indent(text)
    yml = YAML(typ="rt")
    yml.preserve_quotes = True
    yml.width = 10**6
    yml.indent(mapping=indent or 2, sequence=(indent or 2) + (offset or 0), offset=offset or 0)
    yml.representer.add_representer(
        type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null")
    )
    doc = yml.load(text)
    if doc is None:
        doc = CommentedMap()
    aliased = alias_paths(text)
    for dotted, value in edits.items():
        _rt_set(doc, dotted.split("."), value, aliased)
    out = _dump(yml, doc)
    if matches(out, want):
        return out
    got = load_yaml(out)
    for parts, value in _differences(got, want):
        _rt_set(doc, parts, value, aliased)
    return _dump(yml, doc)


def _dump(yml: YAML, doc: Any) -> str:
    buf = io.StringIO()
    yml.dump(doc, buf)
    return buf.getvalue()


def _differences(got: Any, want: Any, prefix: tuple[str, ...] = ()) -> list[tuple[list[str], Any]]:
    """Leaf paths where ``got`` is not ``want``, with the wanted value."""
    if isinstance(got, Mapping) and isinstance(want, Mapping):
        out: list[tuple[list[str], Any]] = []
        for key, value in want.items():
            if key not in got:
                out.append(([*prefix, key], value))
            else:
                out.extend(_differences(got[key], value, (*prefix, key)))
        return out
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        return [
            d
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for d in _differences(g, w, (*prefix, str(i)))
        ]
    return [] if _same(got, want) else [(list(prefix), want)]


def _rt_set(doc: Any, parts: list[str], value: Any, aliased: set[tuple[str, ...]]) -> None:
    node = doc
    for depth, part in enumerate(parts[:-1]):
        if isinstance(item(node, part), CommentedMap):
            node = item(node, part)
            continue
        child = node.get(part) if isinstance(node, Mapping) else None
        if (
            isinstance(child, CommentedSeq)
            and depth + 1 < len(parts) - 1
            and item(child, parts[depth + 1]) is not None
        ):
            node = child
            continue
        if not isinstance(child, CommentedMap):
            child = CommentedMap()
            node[part] = child
        elif tuple(parts[: depth + 1]) in aliased:  # ``key: *name``: edit this place's own copy
            child = node[part] = _detached(child)
        node = child
    old = node.get(parts[-1]) if parts[-1] in node else None
    node[parts[-1]] = _rt_value(old, value)


def _detached(node: Any) -> Any:
    """A deep copy of a ruamel container with no anchor, in the same block or flow style."""
    if isinstance(node, CommentedMap):
        cm = CommentedMap((k, _detached(v)) for k, v in node.items())
        if node.fa.flow_style():
            cm.fa.set_flow_style()
        return cm
    if isinstance(node, CommentedSeq):
        cs = CommentedSeq(_detached(v) for v in node)
        if node.fa.flow_style():
            cs.fa.set_flow_style()
        return cs
    return node


def _rt_value(old: Any, value: Any) -> Any:
    """A value for ruamel to dump as ``flow`` would, in the quotes of the string it replaces."""
    if isinstance(value, str):
        if isinstance(old, SingleQuotedScalarString):
            return SingleQuotedScalarString(value)
        if isinstance(old, DoubleQuotedScalarString) or flow(value).startswith('"'):
            return DoubleQuotedScalarString(value)
        if flow(value).startswith("'"):
            return SingleQuotedScalarString(value)
        return value
    if isinstance(value, Mapping):
        cm = CommentedMap((k, _rt_value(None, v)) for k, v in value.items())
        cm.fa.set_flow_style()
        return cm
    if isinstance(value, list):
        cs = CommentedSeq(_rt_value(None, v) for v in value)
        cs.fa.set_flow_style()
        return cs
    return value
