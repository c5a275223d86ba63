"""What ``.gitattributes`` files say about merging a path, read as git reads them (``gitattributes(5)``), for the one
question the queue asks: does the ``merge`` attribute of this path name the ``union`` driver? Pure: the files'
texts come in as arguments (``mergebot.git.repo`` reads them from main's tree, never from a candidate's).

Rules, as git has them:
  * A line is a pattern and attributes, separated by blanks; blank lines and lines starting with ``#`` say
    nothing. A pattern may be C-quoted (``"a b.txt"``). A pattern starting with ``!`` is not allowed (ignored),
    nor is one ending in ``/`` (it names a directory, and attributes never reach inside a directory by it), nor a
    line with an invalid attribute name (the whole line is ignored).
  * Each attribute is set (``merge``), unset (``-merge``), unspecified again (``!merge``) or given a value
    (``merge=union``).
  * A pattern without a ``/`` (besides a leading one) matches a file's name at any depth below the file's folder;
    one with a ``/`` is anchored to that folder (a leading ``/`` only anchors). ``*`` and ``?`` never match a
    ``/``; ``**/`` at the start matches any folders, ``/**`` at the end everything inside, ``/**/`` zero or more
    folders; ``[...]`` is a class (``[!...]`` or ``[^...]``: its complement); ``\\`` quotes the next character.
  * Precedence: a deeper folder's file over a shallower one's, within a file a later line over an earlier one,
    within a line a later attribute over an earlier one; the highest that names ``merge`` decides.
  * Macros: ``[attr]NAME ATTRS`` in the top-level file defines one (elsewhere it is ignored); ``binary`` is
    ``-diff -merge -text``. A macro that is set sets its attributes where it stands.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

State = bool | str | None  # True: set; False: unset; None: unspecified; str: a value
NAME = re.compile(r"^[-._0-9A-Za-z]+$")
BUILTIN_MACROS: dict[str, tuple[tuple[str, State], ...]] = {
    "binary": (("diff", False), ("merge", False), ("text", False)),
}
MAX_LINE = 2048  # git ignores longer lines
MAX_MACRO_DEPTH = 20


@dataclass(frozen=True)
class Line:
    """One pattern line of one file: where the file is (``folder``, "" for the top), what it matches, and its
    attributes in the order written."""

    folder: str
    pattern: re.Pattern[str]
    name_only: bool  # the pattern has no "/": it matches a file's name at any depth
    attrs: tuple[tuple[str, State], ...]

    def matches(self, path: str) -> bool:
        if self.folder:
            if not path.startswith(self.folder + "/"):
                return False
            path = path[len(self.folder) + 1:]
        subject = path.rsplit("/", 1)[-1] if self.name_only else path
        return self.pattern.fullmatch(subject) is not None


def folders_of(path: str) -> list[str]:
    """The folders whose ``.gitattributes`` can speak about ``path``, the top ("") first."""
    parts = path.split("/")[:-1]
    return [""] + ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def merge_state(files: Sequence[tuple[str, str]], path: str) -> State:
    """The ``merge`` attribute of ``path`` given ``files``: (folder, text) of each ``.gitattributes`` that applies,
    the top first (``folders_of``). None when no line names it (git then merges as text)."""
    macros = dict(BUILTIN_MACROS)
    lines: list[Line] = []
    for folder, text in files:
        parsed, defined = _parse(folder.strip("/"), text)
        lines += parsed
        if not folder.strip("/"):
            macros.update(defined)
    return _resolve([line for line in lines if line.matches(path)], macros).get("merge")


def is_union(files: Sequence[tuple[str, str]], path: str) -> bool:
    """Whether ``files`` mark ``path`` ``merge=union``."""
    return merge_state(files, path) == "union"


def _resolve(matching: list[Line], macros: dict[str, tuple[tuple[str, State], ...]]) -> dict[str, State]:
    """Git's own order: from the highest line down, each attribute takes the first value found, and a macro that
    takes the value "set" fills its attributes there (those not taken yet)."""
    filled: dict[str, State] = {}

    def fill(items: Iterable[tuple[str, State]], depth: int) -> None:
        for name, state in reversed(tuple(items)):
            if name in filled:
                continue
            filled[name] = state
            if state is True and name in macros and depth < MAX_MACRO_DEPTH:
                fill(macros[name], depth + 1)

    for line in reversed(matching):
        fill(line.attrs, 0)
    return filled


def _parse(folder: str, text: str) -> tuple[list[Line], dict[str, tuple[tuple[str, State], ...]]]:
    lines: list[Line] = []
    macros: dict[str, tuple[tuple[str, State], ...]] = {}
    for raw in text.splitlines():
        if len(raw) > MAX_LINE:
            continue
        line = raw.strip(" \t\r")
        if not line or line.startswith("#"):
            continue
        pattern, rest = _pattern(line)
        if pattern is None:
            continue
        attrs = _attrs(rest)
        if attrs is None:
            continue
        if pattern.startswith("[attr]"):
            name = pattern[len("[attr]"):]
            if NAME.match(name) and not name.startswith("-"):
                macros[name] = attrs
            continue
        if pattern.startswith("!") or pattern.endswith("/") or not pattern:
            continue
        name_only = "/" not in pattern  # a leading "/" anchors too
        lines.append(Line(folder, _compiled(pattern.lstrip("/")), name_only, attrs))
    return lines, macros


def _pattern(line: str) -> tuple[str | None, str]:
    """The line's pattern (unquoted) and what follows it."""
    if line.startswith('"'):
        out: list[str] = []
        i = 1
        while i < len(line):
            c = line[i]
            if c == '"':
                return "".join(out), line[i + 1:]
            if c == "\\" and i + 1 < len(line):
                n = line[i + 1]
                if n in "01234567" and re.match(r"[0-7]{3}", line[i + 1:i + 4]):
                    out.append(chr(int(line[i + 1:i + 4], 8)))
                    i += 4
                    continue
                out.append({"n": "\n", "t": "\t", "a": "\a", "b": "\b", "f": "\f", "r": "\r", "v": "\v"}.get(n, n))
                i += 2
                continue
            out.append(c)
            i += 1
        return None, ""  # an unterminated quote: git ignores the line
    parts = re.split(r"[ \t]+", line, maxsplit=1)
    return parts[0], parts[1] if len(parts) > 1 else ""


def _attrs(rest: str) -> tuple[tuple[str, State], ...] | None:
    out: list[tuple[str, State]] = []
    for item in rest.split():
        state: State
        if item.startswith("-"):
            name, state = item[1:], False
        elif item.startswith("!"):
            name, state = item[1:], None
        elif "=" in item:
            name, _, value = item.partition("=")
            state = value
        else:
            name, state = item, True
        if not NAME.match(name) or name.startswith("-"):
            return None  # git ignores the whole line
        out.append((name, state))
    return tuple(out)


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(_translate(pattern))


def _translate(pattern: str) -> str:
    """A wildmatch pattern (``*``, ``?`` and classes stop at ``/``; ``**`` as a whole folder name crosses them) as
    a regular expression for ``fullmatch``."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            starts = i == 0 or pattern[i - 1] == "/"
            if j - i >= 2 and starts and j < n and pattern[j] == "/":
                out.append("(?:.*/)?")  # "**/": any folders, or none
                i = j + 1
                continue
            if j - i >= 2 and starts and j == n:
                out.append(".*")  # "/**" at the end (or a whole "**"): everything
                i = j
                continue
            out.append("[^/]*")
            i = j
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end, cls = _class(pattern, i)
            if end is None:
                out.append(re.escape(c))
                i += 1
            else:
                out.append(cls)
                i = end
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _class(pattern: str, start: int) -> tuple[int | None, str]:
    """The class starting at ``pattern[start] == "["``: where it ends and its regular expression (None: no
    closing ``]``, the ``[`` is itself)."""
    i = start + 1
    negate = i < len(pattern) and pattern[i] in "!^"
    if negate:
        i += 1
    members: list[str] = []
    first = True
    while i < len(pattern):
        c = pattern[i]
        if c == "]" and not first:
            body = "".join(members)
            return i + 1, f"[^{body}/]" if negate else f"(?!/)[{body}]"
        first = False
        if c == "\\" and i + 1 < len(pattern):
            members.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if c == "[" and pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            if end != -1:
                members.append(_POSIX.get(pattern[i + 2:end], ""))
                i = end + 2
                continue
        if c == "-" and members and i + 1 < len(pattern) and pattern[i + 1] != "]":
            members.append("-")
            i += 1
            continue
        members.append(re.escape(c) if c not in "-" else "\\-")
        i += 1
    return None, ""


_POSIX = {"alnum": "0-9A-Za-z", "alpha": "A-Za-z", "digit": "0-9", "lower": "a-z", "upper": "A-Z",
          "space": " \\t\\n\\r\\f\\v", "xdigit": "0-9A-Fa-f", "punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
          "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f", "graph": "!-~", "print": " -~"}
