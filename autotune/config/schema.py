"""Unknown-key checks for trainer configs, against a schema written as data.

The LTX-2 trainer forbids unknown keys in every section, so a typo stops it at
start-up, after minutes of model loading. We check first, and say where: file,
line, the full dotted key, a "did you mean" for near misses, and the right
section for a key put in the wrong one. The schema format is described in
``configs/ltx2-schema.yaml``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from autotune.core.yamltext import load_yaml
from autotune.errors import ConfigError

ANY = "any"
BY = "$by"  # a section whose keys depend on the value of this key (see configs/ltx2-schema.yaml)
DEFAULT = "$default"


@dataclass(frozen=True)
class UnknownKey:
    """One key the schema does not know, with where it sits (1-based line and column)."""

    dotted: str
    key: str
    line: int
    column: int
    allowed: tuple[str, ...]
    elsewhere: tuple[str, ...]  # sections where a key of this name is allowed
    #: For a section whose keys depend on one key's value: (that key, its value here, the values
    #: whose sections do allow this key).
    variant: tuple[str, str, tuple[str, ...]] | None = None

    def hint(self) -> str:
        if self.variant is not None and self.variant[2]:
            by, value, others = self.variant
            where = " or ".join(f"{by}: {v}" for v in others)
            return f"it is a key of {where}, not of {by}: {value}"
        close = difflib.get_close_matches(self.key, self.allowed, n=1, cutoff=0.6)
        if close:
            return f"did you mean {close[0]!r}?"
        if self.elsewhere:
            return f"it belongs in {' or '.join(repr(s) for s in self.elsewhere)}"
        return "allowed here: " + ", ".join(self.allowed) if self.allowed else "this section takes no keys"


@lru_cache(maxsize=4)
def load_schema(name: str = "ltx2-schema.yaml") -> Mapping[str, Any]:
    """A schema shipped under ``configs/``."""
    from configs import config_file

    node = config_file(name)
    try:
        text = node.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"the key schema configs/{name} is missing from this installation ({exc})"
        ) from None
    data = load_yaml(text, f"configs/{name}")
    if not isinstance(data, dict):
        raise ConfigError(f"configs/{name}: a schema is a mapping of sections")
    return data


def find_unknown_keys(text: str, schema: Mapping[str, Any], source: str = "<config>") -> list[UnknownKey]:
    """Every key in the YAML ``text`` that ``schema`` does not allow, in file order."""
    load_yaml(text, source)  # syntax errors first, with the usual line:col message
    doc = YAML(typ="rt").load(text)
    out: list[UnknownKey] = []
    if isinstance(doc, CommentedMap):
        homes = _homes(schema)
        _walk(doc, schema, "", out, homes)
    return sorted(out, key=lambda u: (u.line, u.column))


def check_keys(
    text: str,
    source: str,
    schema: Mapping[str, Any] | None = None,
    *,
    extra_sections: Iterable[str] = (),
    trainer: str = "the LTX-2 trainer",
) -> None:
    """Raise ``ConfigError`` naming every unknown key (file:line:col, dotted key, hint)."""
    schema = dict(schema if schema is not None else load_schema())
    for name in extra_sections:
        schema[name] = ANY
    unknown = find_unknown_keys(text, schema, source)
    if not unknown:
        return
    lines = [f"  {source}:{u.line}:{u.column}: unknown key {u.dotted!r} ({u.hint()})" for u in unknown]
    n = len(unknown)
    raise ConfigError(
        f"{n} unknown key{'s' if n > 1 else ''} in {source}; {trainer} rejects unknown keys at start-up:\n"
        + "\n".join(lines)
        + "\nFix the spelling or remove the key, then run again."
    )


def _walk(node: Any, spec: Any, prefix: str, out: list[UnknownKey], homes: dict[str, list[str]]) -> None:
    if spec is None or spec == ANY:
        return
    if isinstance(spec, list):
        if isinstance(node, list) and spec:
            for i, item in enumerate(node):
                _walk(item, spec[0], f"{prefix}[{i}].", out, homes)
        return
    if not isinstance(spec, dict) or not isinstance(node, CommentedMap):
        return  # a value of the wrong shape is the trainer's own validation to report
    variant: tuple[str, str, dict[str, Any]] | None = None
    if BY in spec:
        spec, variant = _pick_variant(node, spec)
    for key in node:
        dotted = f"{prefix}{key}"
        if key in spec:
            _walk(node[key], spec[key], dotted + ("" if isinstance(spec[key], list) else "."), out, homes)
            continue
        line, col = node.lc.key(key)
        section = re.sub(r"\[\d+\]", "[]", prefix.rstrip(".")) or "top level"
        out.append(
            UnknownKey(
                dotted=dotted,
                key=str(key),
                line=line + 1,
                column=col + 1,
                allowed=tuple(str(k) for k in spec),
                elsewhere=tuple(h for h in homes.get(str(key), []) if h != section),
                variant=None
                if variant is None
                else (
                    variant[0],
                    variant[1],
                    tuple(v for v, sub in variant[2].items() if isinstance(sub, dict) and key in sub),
                ),
            )
        )


def _variants(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in spec.items() if not str(k).startswith("$")}


def _pick_variant(
    node: CommentedMap, spec: Mapping[str, Any]
) -> tuple[dict[str, Any], tuple[str, str, dict[str, Any]] | None]:
    """The section spec for ``node``'s value of the ``$by`` key (its ``$default`` when left out);
    with a value no variant has, every variant's keys (the trainer reports the value itself)."""
    by = str(spec[BY])
    variants = _variants(spec)
    value = node.get(by, spec.get(DEFAULT))
    chosen = variants.get(str(value)) if isinstance(value, (str, int, float)) else None
    if isinstance(chosen, dict):
        return chosen, (by, str(value), variants)
    merged: dict[str, Any] = {}
    for sub in variants.values():
        if isinstance(sub, dict):
            for k, v in sub.items():
                merged.setdefault(k, v)
    return merged, None


def _homes(schema: Mapping[str, Any], prefix: str = "") -> dict[str, list[str]]:
    """Key name -> the sections (dotted, ``"top level"`` for the root) where it is allowed."""
    homes: dict[str, list[str]] = {}
    if BY in schema:
        for variant in _variants(schema).values():
            if isinstance(variant, dict):
                for k, v in _homes(variant, prefix).items():
                    known = homes.setdefault(k, [])
                    known.extend(h for h in v if h not in known)
        return homes
    for key, sub in schema.items():
        homes.setdefault(str(key), []).append(prefix.rstrip(".") or "top level")
        if isinstance(sub, dict):
            for k, v in _homes(sub, f"{prefix}{key}.").items():
                homes.setdefault(k, []).extend(v)
        elif isinstance(sub, list) and sub and isinstance(sub[0], dict):
            for k, v in _homes(sub[0], f"{prefix}{key}[].").items():
                homes.setdefault(k, []).extend(v)
    return homes
