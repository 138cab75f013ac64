"""A training launcher as people write it (a README's ``export ...`` block), read without a shell.

Why not run it with ``bash``: a trial must be one argv we can edit (knob flags, step count,
output folder) and launch ourselves, and nothing the user did not write may run. So the few
shell forms a launcher uses are read here, and anything else is refused with the file, the
line and the reason, never guessed at:

- ``export A=B`` (also ``export A``) and ``A=B`` lines; ``A=B cmd`` prefixes; ``cd DIR &&``
  and ``cd DIR`` lines; ``#!`` and ``#`` comments; blank lines; ``\\`` continuations;
  ``set -e``-style option lines;
- ``'single'`` and ``"double"`` quotes, backslash escapes, ``~`` at the start of a word;
- ``$VAR``, ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}``, from the script's own
  variables, then the environment given (as bash: an unquoted expansion splits on blanks);
- exactly one command.

Refused: pipes, ``;`` and ``||`` lists, ``&``, redirections, ``$(...)``, backticks,
subshells, control flow, ``source``, script arguments (``$1``, ``$@``), an undefined ``$VAR``,
and a second command. Bash's semantics are kept where it matters: a plain ``A=B`` reaches the
command only when ``A`` is exported (or was already in the environment).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from autotune.errors import ConfigError, ScriptLineRefused

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
_CONTROL = {
    "if", "then", "elif", "else", "fi", "for", "while", "until", "do", "done", "case", "esac",
    "function", "select", "{", "}", "[[", "]]", "!", "time", "coproc",
}  # fmt: skip
_SOURCE = {"source", "."}
_SET_OPTION = re.compile(r"[-+][A-Za-z]+|[a-z]+")  # set -eu, set -o pipefail
_OPERATORS = {
    "|": "a pipe ('|')",
    "||": "an '||' list",
    ";": "a ';' list (put each command on its own line, or keep only the training command)",
    "&": "a background job ('&')",
    "<": "a redirection ('<')",
    ">": "a redirection ('>'); autotune keeps each trial's output itself",
    "(": "a subshell ('(')",
    ")": "a subshell (')')",
}


@dataclass(frozen=True)
class _Part:
    """One piece of a word: literal text, or a ``$`` expansion (``op``: '', ':-', '-', ':?', '?')."""

    text: str
    quoted: bool
    var: bool = False
    op: str = ""
    operand: str = ""


@dataclass
class _Word:
    parts: list[_Part] = field(default_factory=list)
    line: int = 0

    def unquoted_literal(self) -> str | None:
        """The word as written when it is plain text (a keyword like ``cd`` or ``export``), else None."""
        if any(p.var or p.quoted for p in self.parts):
            return None
        return "".join(p.text for p in self.parts)


@dataclass(frozen=True)
class LaunchScript:
    """What the launcher runs: ``argv`` (expanded), the ``env`` it exports to that command,
    the folder it ``cd``s into (``None``: it does not), and the line its command starts on."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    line: int


# --- tokens ------------------------------------------------------------------------------------


def _tokenize(text: str) -> list[list[_Word | str]]:
    """Statements (split at unquoted newlines), each a list of words and ``&&`` markers."""
    statements: list[list[_Word | str]] = [[]]
    word: _Word | None = None
    line = 1
    i, n = 0, len(text)

    def add(part: _Part) -> None:
        nonlocal word
        if word is None:
            word = _Word(line=line)
        last = word.parts[-1] if word.parts else None
        if last is not None and not (last.var or part.var) and last.quoted == part.quoted:
            word.parts[-1] = _Part(last.text + part.text, quoted=part.quoted)  # one run of text
        elif part.text or part.var or part.quoted:
            word.parts.append(part)

    def end_word() -> None:
        nonlocal word
        if word is not None:
            statements[-1].append(word)
            word = None

    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 < n and text[i + 1] == "\n":  # a continuation
                i, line = i + 2, line + 1
                continue
            if i + 1 < n and text[i + 1] == "\r" and text[i + 2 : i + 3] == "\n":
                i, line = i + 3, line + 1
                continue
            add(_Part(text[i + 1 : i + 2], quoted=True))
            i += 2
        elif c == "\n":
            end_word()
            if not statements[-1] or statements[-1][-1] != "&&":  # after '&&' the list goes on
                statements.append([])
            line += 1
            i += 1
        elif c in " \t\r":
            end_word()
            i += 1
        elif c == "#" and word is None:
            while i < n and text[i] != "\n":
                i += 1
        elif c == "'":
            close = text.find("'", i + 1)
            if close < 0:
                raise ScriptLineRefused(line, "a single quote is never closed")
            add(_Part(text[i + 1 : close], quoted=True))
            line += text.count("\n", i, close)
            i = close + 1
        elif c == '"':
            i, line = _double_quoted(text, i + 1, line, add)
        elif c == "`":
            raise ScriptLineRefused(line, "a command substitution (backticks)")
        elif c == "$":
            i = _dollar(text, i, line, quoted=False, add=add)
        elif c == "&" and text[i + 1 : i + 2] == "&":
            end_word()
            statements[-1].append("&&")
            i += 2
        elif c in "|;&<>()":
            two = text[i : i + 2]
            raise ScriptLineRefused(line, "it uses " + _OPERATORS.get(two if two == "||" else c, repr(c)))
        else:
            add(_Part(c, quoted=False))
            i += 1
    end_word()
    return statements


def _double_quoted(text: str, i: int, line: int, add: Callable[[_Part], None]) -> tuple[int, int]:
    start_line = line
    buf: list[str] = []
    add(_Part("", quoted=True))
    while i < len(text):
        c = text[i]
        if c == '"':
            add(_Part("".join(buf), quoted=True))
            return i + 1, line
        if c == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
            if text[i + 1] == "\n":
                line += 1
            else:
                buf.append(text[i + 1])
            i += 2
            continue
        if c == "`":
            raise ScriptLineRefused(line, "a command substitution (backticks)")
        if c == "$":
            add(_Part("".join(buf), quoted=True))
            buf = []
            i = _dollar(text, i, line, quoted=True, add=add)
            continue
        if c == "\n":
            line += 1
        buf.append(c)
        i += 1
    raise ScriptLineRefused(start_line, "a double quote is never closed")


def _dollar(text: str, i: int, line: int, *, quoted: bool, add: Callable[[_Part], None]) -> int:
    """Read the expansion at ``text[i] == '$'``; returns the index after it."""
    nxt = text[i + 1 : i + 2]
    if nxt == "(":
        raise ScriptLineRefused(
            line, "a command substitution '$(...)'" if text[i + 2 : i + 3] != "(" else "arithmetic '$((...))'"
        )
    if nxt == "{":
        close = text.find("}", i + 2)
        if close < 0:
            raise ScriptLineRefused(line, "a '${' is never closed")
        inner = text[i + 2 : close]
        m = _NAME.match(inner)
        if not m:
            raise ScriptLineRefused(
                line,
                f"'${{{inner}}}' is not a variable this reader expands (script arguments and "
                "special parameters are not available)",
            )
        rest = inner[m.end() :]
        op = next((o for o in (":-", ":?", "-", "?") if rest.startswith(o)), None)
        if rest and op is None:
            raise ScriptLineRefused(
                line, f"'${{{inner}}}': only ${{NAME}}, ${{NAME:-default}} and ${{NAME:?message}} are read"
            )
        operand = rest[len(op) :] if op else ""
        if "$" in operand or "`" in operand:
            raise ScriptLineRefused(line, f"'${{{inner}}}': an expansion inside a default is not read")
        add(_Part(m.group(0), quoted=quoted, var=True, op=op or "", operand=operand))
        return close + 1
    m = _NAME.match(text, i + 1)
    if m:
        add(_Part(m.group(0), quoted=quoted, var=True))
        return m.end()
    if nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
        raise ScriptLineRefused(line, f"'${nxt}' (script arguments and special parameters are not available)")
    add(_Part("$", quoted=quoted))  # a lone '$' is literal, as in bash
    return i + 1


# --- statements --------------------------------------------------------------------------------


class _Reader:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = dict(environ)
        self.shell: dict[str, str] = {}  # the script's own variables
        self.exported: dict[str, str] = {}
        self.cwd: str | None = None
        self.command: tuple[int, list[str], dict[str, str]] | None = None

    def value(self, name: str) -> str | None:
        if name in self.shell:
            return self.shell[name]
        return self.environ.get(name)

    def expand(self, word: _Word, *, split: bool = True) -> list[str]:
        """The word's fields after expansion (bash: an unquoted expansion splits on blanks, and
        one that comes out empty leaves no field)."""
        fields: list[str] = []
        cur: str | None = None
        for k, part in enumerate(word.parts):
            if not part.var:
                text = part.text
                if k == 0 and not part.quoted and (text == "~" or text.startswith("~/")):
                    text = (self.value("HOME") or "~") + text[1:]
                cur = (cur or "") + text
                continue
            value = self.resolve(part, word.line)
            if part.quoted or not split:
                cur = (cur or "") + value
                continue
            if value[:1].isspace() and cur is not None:
                fields.append(cur)
                cur = None
            for j, piece in enumerate(value.split()):
                if j and cur is not None:
                    fields.append(cur)
                    cur = None
                cur = (cur or "") + piece
            if value[-1:].isspace() and cur is not None:
                fields.append(cur)
                cur = None
        if cur is not None:
            fields.append(cur)
        return fields

    def resolve(self, part: _Part, line: int) -> str:
        value = self.value(part.text)
        empty_counts = part.op.startswith(":")
        missing = value is None or (empty_counts and value == "")
        if part.op in (":-", "-"):
            return part.operand if missing else str(value)
        if part.op in (":?", "?") and missing:
            raise ScriptLineRefused(
                line, f"${{{part.text}}} is not set: {part.operand or 'the script requires it'}"
            )
        if value is None:
            raise ScriptLineRefused(
                line,
                f"${part.text} is not defined: neither the script nor the environment sets it "
                f"(export {part.text}=... in the script or in the shell you run autotune from)",
            )
        return value

    def assign(self, word: _Word) -> tuple[str, str]:
        first = word.parts[0]
        m = _ASSIGNMENT.match(first.text)
        assert m and not first.quoted and not first.var
        rest = _Word([_Part(first.text[m.end() :], quoted=False), *word.parts[1:]], word.line)
        value = "".join(self.expand(rest, split=False))
        return m.group(1), value

    def statement(self, words: list[_Word]) -> None:
        head = words[0].unquoted_literal()
        line = words[0].line
        if head in _CONTROL:
            raise ScriptLineRefused(line, f"it uses shell control flow ('{head}')")
        if head in _SOURCE:
            raise ScriptLineRefused(
                line,
                f"'{head}' runs another file; give the venv's Python by path (/venv/bin/python) "
                "or run autotune from the activated environment",
            )
        if head == "set":
            options = [w.unquoted_literal() for w in words[1:]]
            if options and all(o is not None and _SET_OPTION.fullmatch(o) for o in options):
                return  # set -e, set -euo pipefail, set -x: about the shell, not the command
            raise ScriptLineRefused(line, "'set' with arguments other than options (like set -euo pipefail)")
        if head == "cd":
            if len(words) != 2:
                raise ScriptLineRefused(line, "'cd' needs exactly one folder")
            folder = " ".join(self.expand(words[1]))
            self.cwd = folder if self.cwd is None or folder.startswith("/") else f"{self.cwd}/{folder}"
            return
        if head == "export":
            for w in words[1:]:
                name_only = w.unquoted_literal()
                if name_only is not None and _NAME.fullmatch(name_only):
                    value = self.value(name_only)
                    if value is not None:
                        self.exported[name_only] = value
                    continue
                if not self._is_assignment(w):
                    raise ScriptLineRefused(w.line, "'export' takes NAME=value or NAME")
                name, value = self.assign(w)
                self.shell[name] = value
                self.exported[name] = value
            return
        prefix: dict[str, str] = {}
        k = 0
        while k < len(words) and self._is_assignment(words[k]):
            name, value = self.assign(words[k])
            prefix[name] = value
            k += 1
        if k == len(words):  # only assignments: shell variables (exported if already in the environment)
            for name, value in prefix.items():
                self.shell[name] = value
                if name in self.exported or name in self.environ:
                    self.exported[name] = value
            return
        argv = [field for w in words[k:] for field in self.expand(w)]
        if self.command is not None:
            raise ScriptLineRefused(
                line,
                f"a second command ({argv[0]!r}; the first is on line {self.command[0]}): a launcher "
                "holds exports, cd and exactly one training command",
            )
        self.command = (line, argv, {**self.exported, **prefix})

    @staticmethod
    def _is_assignment(word: _Word) -> bool:
        first = word.parts[0] if word.parts else None
        return bool(first and not first.quoted and not first.var and _ASSIGNMENT.match(first.text))


def parse_launch_script(text: str, source: str, environ: Mapping[str, str]) -> LaunchScript:
    """Read a launcher script (see the module docstring). ``environ``: what ``$VAR`` falls back to.
    Raises ``ConfigError`` naming ``source``, the line and why for anything outside that subset."""
    reader = _Reader(environ)
    try:
        for statement in _tokenize(text.replace("\r\n", "\n")):
            chain: list[list[_Word]] = [[]]
            for item in statement:
                if item == "&&":
                    chain.append([])
                else:
                    assert isinstance(item, _Word)
                    chain[-1].append(item)
            for words in chain:
                if words:
                    reader.statement(words)
                elif len(chain) > 1:
                    raise ScriptLineRefused(_line_of(statement), "an '&&' with no command on one side")
    except ScriptLineRefused as exc:
        raise ConfigError(
            f"{source}:{exc.line}: cannot read this launcher line without a shell: {exc.why}"
        ) from None
    if reader.command is None:
        raise ConfigError(f"{source}: no command found: the launcher must end in the training command")
    line, argv, env = reader.command
    return LaunchScript(argv=argv, env=env, cwd=reader.cwd, line=line)


def _line_of(statement: list[_Word | str]) -> int:
    return next((w.line for w in statement if isinstance(w, _Word)), 0)


def uses_shell_syntax(text: str) -> bool:
    """Whether a one-command template is written as a launcher: several lines, ``&&``, ``export``,
    ``cd``, ``NAME=value`` prefixes or ``$VAR``. A plain command line is none of these."""
    body = re.sub(r"\\\r?\n", " ", text).strip()
    lines = [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if len(lines) > 1 or "&&" in body or re.search(r"\$\{?[A-Za-z_]", body):
        return True
    first = body.split(None, 1)[0] if body else ""
    return first in ("export", "cd", "set") or bool(_ASSIGNMENT.match(first))
