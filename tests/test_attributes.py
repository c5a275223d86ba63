"""``mergebot.git.attributes``: what ``.gitattributes`` files say about a path's ``merge`` attribute, as git reads
them (pure: the files' texts in, the state out). Each case below is checked against git itself
(``git check-attr merge``) by the last test, so the matcher cannot drift from what git does."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mergebot.git.attributes import folders_of, is_union, merge_state

TOP = ""

# (files as (folder, text), path, the merge attribute git gives it)
CASES: list[tuple[list[tuple[str, str]], str, bool | str | None]] = [
    # a pattern without "/" names a file's name at any depth
    ([(TOP, "CHANGELOG.md merge=union\n")], "CHANGELOG.md", "union"),
    ([(TOP, "CHANGELOG.md merge=union\n")], "pkg/CHANGELOG.md", "union"),
    ([(TOP, "*.md merge=union\n")], "docs/deep/NEWS.md", "union"),
    ([(TOP, "CHANGELOG.md merge=union\n")], "CHANGELOG.md.bak", None),
    # with a "/", anchored to the file's folder (a leading "/" only anchors)
    ([(TOP, "/CHANGELOG.md merge=union\n")], "CHANGELOG.md", "union"),
    ([(TOP, "/CHANGELOG.md merge=union\n")], "pkg/CHANGELOG.md", None),
    ([(TOP, "docs/NEWS.md merge=union\n")], "docs/NEWS.md", "union"),
    ([(TOP, "docs/NEWS.md merge=union\n")], "x/docs/NEWS.md", None),
    # "*" and "?" stop at "/"; "**" crosses folders
    ([(TOP, "docs/*.md merge=union\n")], "docs/a/b.md", None),
    ([(TOP, "docs/**/*.md merge=union\n")], "docs/a/b.md", "union"),
    ([(TOP, "docs/**/*.md merge=union\n")], "docs/b.md", "union"),
    ([(TOP, "**/NEWS.md merge=union\n")], "a/b/NEWS.md", "union"),
    ([(TOP, "docs/** merge=union\n")], "docs/a/b.txt", "union"),
    ([(TOP, "NEWS.? merge=union\n")], "NEWS.d", "union"),
    ([(TOP, "NEWS.[a-c] merge=union\n")], "NEWS.b", "union"),
    ([(TOP, "NEWS.[!a-c] merge=union\n")], "NEWS.b", None),
    # later lines win, whatever they say: unset, unspecified, another driver
    ([(TOP, "*.md merge=union\nCHANGELOG.md -merge\n")], "CHANGELOG.md", False),
    ([(TOP, "*.md merge=union\nCHANGELOG.md merge=text\n")], "CHANGELOG.md", "text"),
    ([(TOP, "*.md merge=union\nCHANGELOG.md !merge\n")], "CHANGELOG.md", None),
    ([(TOP, "CHANGELOG.md -merge\n*.md merge=union\n")], "CHANGELOG.md", "union"),
    ([(TOP, "CHANGELOG.md merge\n")], "CHANGELOG.md", True),
    # a deeper folder's file wins over the top's; it speaks only of what is under it
    ([(TOP, "*.md merge=union\n"), ("docs", "NEWS.md -merge\n")], "docs/NEWS.md", False),
    ([(TOP, "*.md -merge\n"), ("docs", "NEWS.md merge=union\n")], "docs/NEWS.md", "union"),
    ([(TOP, "*.md -merge\n"), ("docs", "NEWS.md merge=union\n")], "NEWS.md", False),
    ([("docs", "/NEWS.md merge=union\n")], "docs/NEWS.md", "union"),
    ([("docs", "/NEWS.md merge=union\n")], "docs/x/NEWS.md", None),
    # macros: binary is -diff -merge -text; a macro set where it stands; defined only at the top
    ([(TOP, "CHANGELOG.md merge=union binary\n")], "CHANGELOG.md", False),
    ([(TOP, "CHANGELOG.md binary merge=union\n")], "CHANGELOG.md", "union"),
    ([(TOP, "[attr]log merge=union\nCHANGELOG.md log\n")], "CHANGELOG.md", "union"),
    ([(TOP, "[attr]log merge=union\nCHANGELOG.md log\nCHANGELOG.md -log\n")], "CHANGELOG.md", None),
    ([("docs", "[attr]log merge=union\nNEWS.md log\n")], "docs/NEWS.md", None),
    # what git ignores: comments, directory patterns, negated patterns, a line with a bad attribute name
    ([(TOP, "# CHANGELOG.md merge=union\n")], "CHANGELOG.md", None),
    ([(TOP, "docs/ merge=union\n")], "docs/NEWS.md", None),
    ([(TOP, "!CHANGELOG.md merge=union\n")], "CHANGELOG.md", None),
    ([(TOP, "CHANGELOG.md merge=union b@d\n")], "CHANGELOG.md", None),
    # quoted patterns, blanks and tabs
    ([(TOP, '"my notes.md" merge=union\n')], "my notes.md", "union"),
    ([(TOP, "  CHANGELOG.md\t  merge=union  \r\n")], "CHANGELOG.md", "union"),
]


@pytest.mark.parametrize(("files", "path", "want"), CASES)
def test_the_merge_attribute_of_a_path_is_what_git_says(files: list[tuple[str, str]], path: str,
                                                         want: bool | str | None) -> None:
    assert merge_state(files, path) == want
    assert is_union(files, path) == (want == "union")


def test_the_folders_that_speak_of_a_path_start_at_the_top() -> None:
    assert folders_of("CHANGELOG.md") == [""]
    assert folders_of("a/b/c.md") == ["", "a", "a/b"]


def test_every_case_agrees_with_git_check_attr(tmp_path: Path) -> None:
    """The cases above, asked of git itself in a fresh repository each (``git check-attr merge``)."""
    for n, (files, path, want) in enumerate(CASES):
        root = tmp_path / str(n)
        root.mkdir()
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        for folder, text in files:
            (root / folder).mkdir(parents=True, exist_ok=True)
            (root / folder / ".gitattributes").write_bytes(text.encode())
        out = subprocess.run(["git", "-c", "core.attributesFile=/dev/null", "check-attr", "merge", "--", path],
                             cwd=root, capture_output=True, text=True, check=True).stdout
        said = out.rsplit(": ", 1)[-1].strip()
        got = {"set": True, "unset": False, "unspecified": None}.get(said, said)
        assert got == want, (files, path, out)
