"""Reading and editing YAML configs: safe loading, errors with line and column, and
round-trip edits that keep the file's comments (people read them).

Plain data: ``autotune.core.yamltext.load_yaml``. Edits of a trainer's own file: ``RoundTripConfig``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from autotune.config import yamledit
from autotune.core.yamltext import MAX_CONFIG_BYTES, check_config_size, load_yaml
from autotune.errors import ConfigEditError, ConfigError

_MISSING = object()


def read_config_text(path: Path, what: str = "config file") -> str:
    """The text of a UTF-8 config file; a missing, unreadable, binary or oversized
    (``MAX_CONFIG_BYTES``) file is a ``ConfigError`` that names the path and what to do (never a
    traceback)."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as f:
            size = os.fstat(f.fileno()).st_size
            check_config_size(size, f"{what} {path}")
            text = f.read(MAX_CONFIG_BYTES + 1)  # never more: a pipe or /dev/zero is refused fast
        check_config_size(len(text), f"{what} {path}")
        return text
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}; check the path") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path} is a directory; give the YAML file inside it") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); "
            "give a YAML text file, saved as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read {what} {path}: {exc.strerror or exc}; check that it exists and is readable"
        ) from None


def load_yaml_file(path: Path) -> Any:
    return load_yaml(read_config_text(path), str(path))


def dotted_items(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Leaves of a nested mapping as ``("section.key", value)`` pairs (lists are leaves)."""
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from dotted_items(value, path + ".")
        else:
            yield path, value


class RoundTripConfig:
    """A YAML document edited as text: every line you do not set stays byte for byte.

    Load it with ``from_text``, change leaves with ``set("section.key", value)``,
    write it with ``dump()``. Positions come from ruamel's round-trip parser; the
    edit replaces only the value (an inline comment after it survives). A key that
    is missing is added at the end of its section; a missing section at the end.
    Flow collections (``{a: 1}``, on one line or many) and aliases are edited by their exact
    span; where no line edit is exact (an anchor, a merge), ruamel's round trip rewrites the
    file, comments kept. Every edit is checked by parsing it back (``yamledit``).
    """

    def __init__(self, text: str, source: str) -> None:
        self._text = text
        self.source = source
        self._doc = self._parse(text)

    @classmethod
    def from_text(cls, text: str, source: str = "<config>") -> RoundTripConfig:
        return cls(text, source)

    def _parse(self, text: str) -> CommentedMap:
        load_yaml(text, self.source)  # syntax errors get the same clear message as plain loads
        doc = _rt().load(text)
        if doc is None:
            return CommentedMap()
        if not isinstance(doc, CommentedMap):
            raise ConfigError(
                f"{self.source}: expected a mapping of sections at the top of the file (like "
                f"'optimization:' on its own line), found {'a list' if isinstance(doc, list) else 'a single value'}; "
                "check that the file is the trainer's config"
            )
        return doc

    def get(self, dotted: str, default: Any = None) -> Any:
        """The value at ``dotted`` (``section.key``; an index part reaches into a list:
        ``config.process.0.train.steps``), else ``default``."""
        found = _lookup(self._doc, dotted)
        return default if found is _MISSING else found

    def has(self, dotted: str) -> bool:
        sentinel = object()
        return self.get(dotted, sentinel) is not sentinel

    def set(self, dotted: str, value: Any) -> None:
        """Set a leaf to a scalar or a flow list/map, creating missing sections."""
        self.set_many({dotted: value})

    def set_many(self, values: Mapping[str, Any]) -> None:
        """Set several leaves; every line not set stays as written.

        A value the file already says keeps its spelling (``none``, ``~``, ``True``, quotes).
        The edit is a line edit where that is exact, else ruamel's round trip; either way the
        result is parsed and compared with the data intended, and a mismatch is our bug
        (``ConfigEditError``), never the user's syntax error.
        """
        plain = self.to_plain()
        edits: dict[str, Any] = {}
        for dotted, value in values.items():
            self._deepest_section(dotted)  # setting through a scalar is the caller's mistake
            old = _lookup(plain, dotted)
            if old is not _MISSING and yamledit.keeps_spelling(old, value):
                continue
            edits[dotted] = value
        if not edits:
            return
        want = yamledit.intended(plain, edits)
        before, doc = self._text, self._doc
        try:
            self._line_edit(edits)
            text: str | None = self._text
        except Exception:  # any failure of the line edit falls back to the round trip
            text = None
        self._text, self._doc = before, doc
        if text is None or not yamledit.matches(text, want):
            try:
                text = yamledit.ruamel_rewrite(before, edits, want)
            except Exception as exc:  # reported below as ours, with the cause
                raise ConfigEditError(_our_fault(self.source, edits, f"{type(exc).__name__}: {exc}")) from exc
            if not yamledit.matches(text, want):
                raise ConfigEditError(
                    _our_fault(self.source, edits, "the edited text does not read back as set")
                )
        self._reload(text)

    def _line_edit(self, edits: Mapping[str, Any]) -> None:
        """Edit in place: flow values by their exact span, block values by line, then add missing keys."""
        root, aliases = yamledit.compose(self._text)
        shared = yamledit.shared_nodes(root)
        spans: list[tuple[int, int, str]] = []
        block: dict[str, Any] = {}
        missing: dict[str, Any] = {}
        for dotted, value in edits.items():
            parts = dotted.split(".")
            path = yamledit.section_path(root, parts[:-1])
            pair = yamledit.own_pair(path[-1], parts[-1]) if len(path) == len(parts) else None
            if pair is None:
                missing[dotted] = value
                continue
            node = pair[1]
            alias = aliases.get((id(path[-1]), id(pair[0])))
            if alias is not None:  # ``key: *name``: only this place changes, the anchor stays
                spans.append((*alias, yamledit.flow(value)))
                continue
            if not yamledit.is_plain_node(self._text, node, shared):
                raise ConfigEditError("an anchored or aliased value: not a line edit")
            if getattr(path[-1], "flow_style", False) or getattr(node, "flow_style", False):
                start, end = node.start_mark.index, node.end_mark.index
                spans.append((start, end, yamledit.styled(self._text[start:end], value)))
            else:
                block[dotted] = value
        text = self._text
        for start, end, rendered in sorted(spans, reverse=True):
            text = text[:start] + rendered + text[end:]
        if spans:
            self._reload(text)
        if block:
            self._block_edit(block)
        for dotted, value in missing.items():
            self._insert(dotted, value)

    def _block_edit(self, values: Mapping[str, Any]) -> None:
        """Replace the values of keys in block mappings, line by line (one parse for all)."""
        lines = self._text.splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        existing: list[tuple[int, CommentedMap, str, Any]] = []
        for dotted, value in values.items():
            node, _ = self._deepest_section(dotted)
            key = dotted.split(".")[-1]
            existing.append((node.lc.key(key)[0], node, key, value))
        # Bottom-up, so an edit never moves the lines of the ones still to come.
        for _, node, key, value in sorted(existing, key=lambda e: e[0], reverse=True):
            rendered = _keep_style(lines, node, key, value)
            lines = _replace_value(lines, node, key, rendered)
        self._reload("".join(lines))

    def _deepest_section(self, dotted: str) -> tuple[CommentedMap, int]:
        """The deepest section on ``dotted``'s path that exists, and its depth."""
        node: Any = self._doc
        depth = 0
        for part in dotted.split(".")[:-1]:
            child = yamledit.item(node, part) if isinstance(node, list) else None
            if child is None:
                child = node.get(part) if isinstance(node, Mapping) else None
            if child is None:
                break
            if not isinstance(child, (CommentedMap, CommentedSeq)):
                raise ConfigError(f"{self.source}: cannot set {dotted}: {part!r} is not a section")
            node, depth = child, depth + 1
        if not isinstance(node, CommentedMap):  # a list, and no item of it by that index
            raise ConfigError(f"{self.source}: cannot set {dotted}: the list it names has no such item")
        return node, depth

    def _insert(self, dotted: str, value: Any) -> None:
        lines = self._text.splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        node, depth = self._deepest_section(dotted)
        missing = dotted.split(".")[depth:]
        if depth and node.fa.flow_style():  # ``section: {a: 1}``: add before its closing brace
            section = yamledit.section_path(yamledit.compose(self._text)[0], dotted.split(".")[:depth])
            if len(section) != depth + 1:
                raise ConfigEditError("a flow section not written in the file itself")
            self._reload(yamledit.flow_insert(self._text, section[-1], missing, value))
            return
        indent = _child_indent(node, lines) if depth else 0
        new = [" " * (indent + 2 * i) + f"{part}:\n" for i, part in enumerate(missing[:-1])]
        new.append(" " * (indent + 2 * (len(missing) - 1)) + f"{missing[-1]}: {yamledit.flow(value)}\n")
        at = _block_end(node, lines) if depth else len(lines)
        if not depth and lines and lines[-1].strip():
            new.insert(0, "\n")
        lines[at:at] = new
        self._reload("".join(lines))

    def _reload(self, text: str) -> None:
        self._text = text
        self._doc = self._parse(text)

    def to_plain(self) -> Any:
        """The document as plain dicts and lists (for validation and hashing)."""
        return load_yaml(self._text, self.source)

    def dump(self) -> str:
        return self._text


def _rt() -> YAML:
    return YAML(typ="rt")


def _replace_value(lines: list[str], parent: CommentedMap, key: str, rendered: str) -> list[str]:
    key_line, key_col = parent.lc.key(key)
    old = parent[key]
    if (isinstance(old, (Mapping, list)) and old and not getattr(old, "fa", None)) or _is_block(old):
        # A block value: drop its lines (deeper-indented than the key), put the flow value inline.
        end = key_line + 1
        while end < len(lines):
            stripped = lines[end].strip()
            indent = len(lines[end]) - len(lines[end].lstrip())
            if stripped and indent <= key_col and not (stripped.startswith("- ") and indent == key_col):
                break
            if not stripped or indent > key_col or stripped.startswith("-"):
                end += 1
                continue
            break
        # Keep trailing blank and comment lines that belong to what follows.
        while end > key_line + 1 and (not lines[end - 1].strip() or lines[end - 1].strip().startswith("#")):
            if (
                lines[end - 1].strip().startswith("#")
                and len(lines[end - 1]) - len(lines[end - 1].lstrip()) > key_col
            ):
                break
            end -= 1
        head = lines[key_line]
        colon = head.index(":", key_col)
        comment = _inline_comment(head[colon + 1 :])
        lines[key_line:end] = [f"{head[: colon + 1]} {rendered}{comment}\n"]
        return lines
    line_no, col = parent.lc.value(key)
    if line_no != key_line:  # the scalar sits on its own line: fold it back onto the key's line
        head = lines[key_line]
        colon = head.index(":", key_col)
        lines[key_line : line_no + 1] = [f"{head[: colon + 1]} {rendered}\n"]
        return lines
    line = lines[key_line]
    rest = line[col:]
    comment = _inline_comment(rest)
    lines[key_line] = f"{line[:col]}{rendered}{comment}\n"
    return lines


def _keep_style(lines: list[str], parent: CommentedMap, key: str, value: Any) -> str:
    """``value`` in the style of the scalar it replaces (quotes, ``True``), as the file's author wrote it."""
    old = parent[key]
    if not isinstance(old, (str, bool)) or isinstance(old, bool) is not isinstance(value, bool):
        return yamledit.flow(value)
    line_no, col = parent.lc.value(key)
    token = lines[line_no][col:].split("#", 1)[0].strip() if line_no < len(lines) else ""
    return yamledit.styled(token, value)


def _lookup(plain: Any, dotted: str) -> Any:
    node = plain
    for part in dotted.split("."):
        if isinstance(node, list) and yamledit.item(node, part) is not None:
            node = yamledit.item(node, part)
            continue
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _our_fault(source: str, edits: Mapping[str, Any], why: str) -> str:
    keys = ", ".join(edits)
    return (
        f"autotune could not edit {source} correctly (setting {keys}): {why}. This is a bug in "
        "autotune, not in your file, which is valid YAML and was left as it is; please report it "
        "with the file attached"
    )


def _is_block(value: Any) -> bool:
    fa = getattr(value, "fa", None)
    return isinstance(value, (Mapping, list)) and fa is not None and not fa.flow_style() and len(value) > 0


def _inline_comment(rest: str) -> str:
    """The ``  # comment`` part of a line's tail, if any (outside quotes)."""
    quote = ""
    for i, ch in enumerate(rest):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and i > 0 and rest[i - 1] in " \t":
            j = i
            while j > 0 and rest[j - 1] in " \t":
                j -= 1
            return rest[j:].rstrip("\n")
    return ""


def _child_indent(section: CommentedMap, lines: list[str]) -> int:
    if section:
        first = next(iter(section))
        return int(section.lc.key(first)[1])
    return 2


def _block_end(section: CommentedMap, lines: list[str]) -> int:
    """Line index just after the last key of ``section`` and its value."""
    if not section:
        return len(lines)
    last = list(section)[-1]
    key_line, key_col = section.lc.key(last)
    end = key_line + 1
    while end < len(lines):
        stripped = lines[end].strip()
        indent = len(lines[end]) - len(lines[end].lstrip())
        if stripped and not stripped.startswith("#") and indent < key_col:
            break
        if stripped and not stripped.startswith("#") and indent == key_col and not stripped.startswith("-"):
            break
        end += 1
    while end > key_line + 1 and (not lines[end - 1].strip() or lines[end - 1].strip().startswith("#")):
        end -= 1
    return end
