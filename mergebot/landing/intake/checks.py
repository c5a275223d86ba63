"""Judging a push: pure decisions from facts; the sentences are ``mergebot.messages``'.

The pre-receive path (``mergebot.landing.intake.prereceive``) gathers facts — the pushed ref updates, the subtask
rows they name, the commits and paths they bring — and asks the functions here. Nothing here does I/O, so
every rule is tested on its own.

Rules, in the order they are checked:
  1. Only ``refs/heads/subtasks/<id>/v<claim_version>`` may be pushed (the grammar is ``mergebot.messages.refs``').
     The target branch, any other branch, tags and every other ref are protected: only Mergebot moves main.
  2. A deletion is allowed only of a subtask ref the pusher owns (at any of its versions).
  3. The pusher must own the subtask (owner taken from the authenticated token), at the current claim
     version, while it is running or submitted. An older version is "stale"; a newer one does not exist yet
     ("not claimed": a subtask never claimed is at version 0); a subtask nobody holds (landed, ready, failed,
     cancelled) is "not running", one another agent holds is "not yours".
  4. The pushed history must be made for this subtask: it may not touch protected paths, exceed the size
     limits, bring an unrelated root, or include other subtasks' commits that have not landed.
  5. With a footprint (the paths its subtask expects to touch) and a repository that refuses changes outside
     it, every changed path must be in the footprint (otherwise that is only a warning on the verdict).
  6. It may not be a change another subtask already made: the same patch id as another subtask's landed or
     live candidate is a duplicate (a re-push of one's own change is not).
  7. What decides how the tests run is main's (``check_config``): a push may not add, change or delete a file
     matching the repository's check-config globs (by default any ``conftest.py``, ``pytest.ini``, ``tox.ini``,
     ``noxfile.py``; a glob without ``/`` matches the name in any folder), a file the check's interpreter or pytest
     reads at start-up (``verifier.startup.is_startup``: ``.pytest.ini``, ``pytest.toml``, ``.pytest.toml``,
     ``sitecustomize.py``, ``*.pth``, ``*.dist-info/``, byte code...), a module that would shadow one of the check's
     interpreter (``verifier.startup.shadows``: ``json.py``, ``pytest.py``... where it can come first on
     ``sys.path``; test paths are exempt, since a judging run takes them from main), the pytest sections of a
     ``setup.cfg`` (``[tool:pytest]``, ``[pytest]``) or a ``pyproject.toml`` (``[tool.pytest*]``: the parsed
     sections are compared, not the files), a ``setup.cfg``, ``pyproject.toml`` or ``setup.py`` added or deleted
     (pytest's rootdir moves with them), or a file of main's that the check's command names (a script, a
     ``Makefile`` for ``make``), unless a lead allowed its subtask to change the check. The verifier's own pytest
     plugin's name (``mergebot_outcomes``) is refused even then: a module of that name in the checkout would speak
     for it.
  8. Where the repository refuses it (``--suspicious refuse``), non-test code that reaches into the test machinery
     (the tamper signal, ``mergebot.landing.intake.tamper``: the outcome pipe, pytest's variables, the held-out mount,
     ``sys.modules`` or builtins written, an exit at import, an ``__eq__`` that is always true...) is refused
     (``suspicious``), unless a lead allowed the subtask to change the check; elsewhere it is named on the verdict.
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import posixpath
import shlex
import tomllib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mergebot import messages as say
from mergebot.landing.judge.reset import matches as is_test_path
from mergebot.messages.refs import parse_subtask_ref
from mergebot.models import Owner
from verifier import startup


@dataclass(frozen=True)
class RefUpdate:
    old: str
    new: str
    ref: str

    @property
    def deletion(self) -> bool:
        return set(self.new) == {"0"}


@dataclass(frozen=True)
class Refusal:
    ref: str
    code: str
    message: str
    paths: tuple[str, ...] = ()  # the paths the rule is about (protected ones touched, an oversized file)
    twin: Twin | None = None  # for a duplicate: the other subtask's change


@dataclass(frozen=True)
class Twin:
    """Another subtask's candidate with the same change: landed (``landed_sha``), or live."""

    candidate_id: int
    subtask_id: int
    owner: str
    status: str
    sha: str
    landed_sha: str | None = None


def judge_ref(update: RefUpdate, pusher_id: int, target_branch: str, row: Owner | None) -> Refusal | None:
    """Rules 1 to 3 for one ref update. None means the ref may proceed to the content checks."""
    ref = update.ref
    parsed = parse_subtask_ref(ref)
    if ref == f"refs/heads/{target_branch}":
        return Refusal(ref, "protected_ref", say.pushed_to_target(ref, target_branch))
    if parsed is None:
        return Refusal(ref, "protected_ref", say.protected_ref(ref))
    subtask_id, version = parsed
    if row is None:
        return Refusal(ref, "unknown_subtask", say.unknown_subtask(ref, subtask_id))
    if update.deletion:
        if row.owner_id != pusher_id:
            return Refusal(ref, "not_owner", say.delete_not_yours(ref, subtask_id))
        return None
    if version < row.claim_version:
        return Refusal(ref, "stale_claim", say.stale_version(ref, version, subtask_id, row.claim_version))
    if version > row.claim_version:  # nobody holds that claim: never claimed, or not yet at that version
        said = say.never_claimed(ref, subtask_id, row.status) if row.claim_version == 0 else \
            say.future_version(ref, version, subtask_id, row.claim_version)
        return Refusal(ref, "not_claimed", said)
    if row.owner_id is None and row.status not in ("running", "submitted"):  # nobody's: landed, ready, failed...
        return Refusal(ref, "not_running", say.not_running(ref, subtask_id, row.status))
    if row.owner_id != pusher_id:
        return Refusal(ref, "not_owner", say.not_yours(ref, subtask_id, row.status, row.owner_id is not None))
    if row.landing:
        return Refusal(ref, "landing", say.landing_now(ref, subtask_id))
    if row.status not in ("running", "submitted"):
        return Refusal(ref, "not_running", say.not_running(ref, subtask_id, row.status))
    return None


@dataclass(frozen=True)
class Content:
    """What a pushed tip brings relative to the target branch."""

    changed_paths: Sequence[str]
    commit_count: int
    roots: Sequence[str]  # commits with no parents among the new ones: unrelated history
    foreign: Sequence[tuple[str, int]]  # (commit, subtask id) for other subtasks' unlanded commits
    largest_file: tuple[str, int]
    push_bytes: int
    already_on_target: bool
    patch_id: str | None = None  # the change as one id (``git.patch_id``)
    check_config: Sequence[str] = ()  # the changed paths that configure the check (``check_config_paths``)
    shadowed: Sequence[tuple[str, str]] = ()  # of those, (path, module) for each that shadows a module
    suspicious: Sequence[dict[str, Any]] = ()  # the tamper signal's findings (read only where they refuse: rule 8)


@dataclass(frozen=True)
class Limits:
    protected_paths: Sequence[str]
    max_file_bytes: int
    max_push_bytes: int
    max_commits: int = 1000
    footprint_refuse: bool = False  # a change outside its subtask's footprint is refused, not only flagged
    check_config_allowed: bool = False  # a lead allowed the subtask to change what configures the check
    suspicious_refuse: bool = False  # the tamper signal refuses (``repo set --suspicious refuse``), not only names


def is_protected(path: str, patterns: Sequence[str]) -> bool:
    """A pattern protects the path it names and everything under it (``ci/`` and ``ci`` alike), and every file
    it matches as an ``fnmatch`` pattern (``*.lock``). A name is taken literally too: ``[x].cfg`` protects the
    file of that name, not only ``x.cfg``."""
    for p in patterns:
        folder = p.rstrip("/") + "/"  # ``ci``, ``ci/`` and ``ci//`` alike
        if (path + "/").startswith(folder):
            return True
        if fnmatch.fnmatchcase(path, p):
            return True
    return False


def outside_footprint(paths: Sequence[str], footprint: Sequence[str]) -> list[str]:
    """The changed paths the footprint does not cover (a footprint entry covers what a protected-path pattern
    would); none when there is no footprint."""
    return [p for p in paths if not is_protected(p, footprint)] if footprint else []


def judge_content(update: RefUpdate, target_branch: str, content: Content, limits: Limits,
                  footprint: Sequence[str] = ()) -> Refusal | None:
    """Rules 4 and 5 for one ref update whose ref passed ``judge_ref``."""
    ref = update.ref
    if content.push_bytes > limits.max_push_bytes:
        return Refusal(ref, "too_large", say.push_too_large(ref, content.push_bytes, limits.max_push_bytes))
    path, size = content.largest_file
    if size > limits.max_file_bytes:
        return Refusal(ref, "too_large", say.file_too_large(ref, path, size, limits.max_file_bytes), (path,))
    if content.commit_count > limits.max_commits:
        return Refusal(ref, "history_anomaly", say.too_many_commits(ref, limits.max_commits, target_branch))
    if content.already_on_target:
        return Refusal(ref, "nothing_to_land", say.already_on_target(ref, target_branch))
    if content.roots:
        return Refusal(ref, "history_anomaly", say.unrelated_history(ref, content.roots[0], target_branch))
    if content.foreign:
        sha, other = content.foreign[0]
        return Refusal(ref, "history_anomaly", say.foreign_commit(ref, sha, other, target_branch))
    touched = [p for p in content.changed_paths if is_protected(p, limits.protected_paths)]
    if touched:
        return Refusal(ref, "protected_path", say.protected_paths(ref, touched), tuple(touched[:100]))
    ours = [p for p in content.check_config if is_ours(p)]
    config = ours or ([] if limits.check_config_allowed else list(content.check_config))
    if config:
        return Refusal(ref, "check_config", say.check_config(ref, config, target_branch,
                                                                   allowed=limits.check_config_allowed,
                                                                   shadowed=[s for s in content.shadowed
                                                                             if s[0] in config]),
                       tuple(config[:100]))
    outside = outside_footprint(content.changed_paths, footprint) if limits.footprint_refuse else []
    if outside:
        return Refusal(ref, "outside_footprint", say.outside_footprint(ref, outside, footprint), tuple(outside[:100]))
    if content.suspicious and limits.suspicious_refuse and not limits.check_config_allowed:
        paths = tuple(dict.fromkeys(str(f["path"]) for f in content.suspicious))
        return Refusal(ref, "suspicious", say.suspicious(ref, content.suspicious), paths[:100])
    return None


PLUGIN_NAME = "mergebot_outcomes"  # verifier/pytest_plugin's module: no checkout may hold one of that name
SECTIONED = ("setup.cfg", "pyproject.toml")  # their pytest sections configure the check, the rest does not
ROOT_MARKERS = ("setup.cfg", "pyproject.toml", "setup.py")  # one added or deleted moves pytest's rootdir


def is_ours(path: str) -> bool:
    """A path that would shadow the verifier's own pytest plugin."""
    parts = path.split("/")
    return parts[-1] in (f"{PLUGIN_NAME}.py", PLUGIN_NAME) or PLUGIN_NAME in parts[:-1]


def matches_glob(path: str, globs: Sequence[str]) -> bool:
    """A glob without ``/`` matches the file's name in any folder; one with ``/`` matches the whole path."""
    name = posixpath.basename(path)
    return any(fnmatch.fnmatchcase(path if "/" in g else name, g) for g in globs)


INTERPRETERS = ("sh", "bash", "dash", "zsh", "python", "python3", "node", "ruby", "perl")
MAKES = ("make", "gmake")


def command_files(command: str) -> list[str]:
    """The repository files a check's command runs: each command's program when it is a path (``./ci/check.sh``),
    the script an interpreter is given (``sh ci/check.sh``, ``python tools/check.py``; not ``python -m``), and a
    make's makefiles (``-f FILE``, or ``Makefile``). Whether each is a file of the repository is for the caller to
    see. Data a command merely reads (``grep x calc.py``) does not configure it."""
    try:
        lex = shlex.shlex(command, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        words = list(lex)
    except ValueError:
        words = command.split()
    segments: list[list[str]] = [[]]
    for w in words:
        if w and set(w) <= set("&|;()"):
            segments.append([])
        else:
            segments[-1].append(w)
    out: list[str] = []
    for seg in segments:
        seg = [w for w in seg if "=" not in w.split("/")[0] or w.startswith(("-", "."))]  # FOO=1 cmd: the command
        while seg and seg[0] in ("!", "exec", "env", "time", "nice", "timeout"):
            seg = seg[1:] if seg[0] != "timeout" else seg[2:]
        if not seg:
            continue
        prog, args = seg[0], seg[1:]
        name = posixpath.basename(prog)
        if "/" in prog:
            out.append(prog)
        if name in MAKES:
            out += [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-f"] or ["Makefile", "makefile",
                                                                                  "GNUmakefile"]
        elif name in INTERPRETERS or name.startswith("python3."):
            script = next((a for a in args if not a.startswith("-")), None)
            if script is not None and "-m" not in args[:args.index(script)] and "-c" not in args[:args.index(script)]:
                out.append(script)
    norm = [posixpath.normpath(p) for p in out if not p.startswith(("/", "$", "~"))]
    return list(dict.fromkeys(p for p in norm if not p.startswith("..") and p != "."))


def pytest_sections(path: str, text: str | None) -> str | None:
    """The pytest configuration a ``setup.cfg`` or ``pyproject.toml`` holds, canonical (sorted JSON); None when it
    holds none; ``"unreadable"`` when the file does not parse (which then counts as a change)."""
    if text is None:
        return None
    try:
        if posixpath.basename(path) == "pyproject.toml":
            tool = tomllib.loads(text).get("tool", {})
            found: dict[str, object] = {k: v for k, v in tool.items() if k.startswith("pytest")} \
                if isinstance(tool, dict) else {}
        else:
            parser = configparser.RawConfigParser()
            parser.read_string(text)
            found = {s: dict(parser.items(s)) for s in parser.sections() if s in ("tool:pytest", "pytest")}
    except (tomllib.TOMLDecodeError, configparser.Error, ValueError):
        return "unreadable"
    return json.dumps(found, sort_keys=True, default=str) if found else None


def shadowing(changed: Sequence[str], modules: Collection[str], roots: Collection[str],
              tests: Sequence[str]) -> list[tuple[str, str]]:
    """(path, module) for each changed path that shadows a module of the check's interpreter (rule 7): ``modules``
    its module names (``verifier.startup.interpreter_modules``), ``roots`` the pushed tree's folders that may come
    first on ``sys.path`` (``verifier.startup.path_roots``), ``tests`` the repository's test paths (exempt: a judging
    run takes them from main)."""
    out = []
    for path in changed:
        found = startup.module_name(path)
        if found and not is_test_path(path, tests) and startup.shadows(path, modules, roots):
            out.append((path, found[1]))
    return out


def check_config_paths(changed: Sequence[str], globs: Sequence[str], named: Collection[str],
                       texts: Mapping[str, tuple[str | None, str | None]],
                       shadowed: Collection[str] = ()) -> list[str]:
    """The changed paths that configure the check (rule 7). ``named``: the files of main's tree that the check's
    command names (``command_files``, kept where main has them); ``texts``: for each changed ``setup.cfg``,
    ``pyproject.toml`` and ``setup.py``, its text on main and in the push (None where the file does not exist: one
    added or deleted moves pytest's rootdir, which decides which ``conftest.py`` it loads); ``shadowed``: the
    changed paths that shadow a module of the check's interpreter (``shadowing``)."""
    named = set(named)
    shadowed = set(shadowed)
    out = []
    for path in changed:
        if is_ours(path) or matches_glob(path, globs) or path in named or startup.is_startup(path) or path in shadowed:
            out.append(path)
        elif posixpath.basename(path) in ROOT_MARKERS:
            old, new = texts.get(path, (None, None))
            if (old is None) != (new is None) or pytest_sections(path, old) != pytest_sections(path, new):
                out.append(path)
    return out


def judge_twin(update: RefUpdate, subtask_id: int, twin: Twin | None) -> Refusal | None:
    """Rule 6: the same change as another subtask's (found by the change's patch id)."""
    if twin is None or twin.subtask_id == subtask_id:
        return None
    return Refusal(update.ref, "duplicate", say.duplicate_change(update.ref, twin.subtask_id, twin.owner, twin.status,
                                                                  twin.sha, twin.landed_sha, subtask_id), twin=twin)


def summary(refusals: Sequence[Refusal]) -> str:
    """The text git prints to the pusher (each line prefixed with 'remote:' by git)."""
    return say.refused_push([r.message for r in refusals])
