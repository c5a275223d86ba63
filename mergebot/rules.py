"""A repository's rules as one model (issue 42): what ``repo add`` / ``repo set``, the API and the stores take, with
their defaults and their checks in one place.

  * ``Rules``: every rule of a repository, checked; what ``add_repo`` records (``Rules.of(**given)``).
  * ``RulesChange``: the rules ``repo set`` changes, each checked as ``Rules`` checks it; a rule not given (None)
    stays, and ``reset`` names the optional ones that go back to their default (NULL).
  * ``QueueRules``: the queue's rules for one repository (``queue_rules``): the repository's own, where it set
    them, else the server's (MERGEBOT_SPECULATION_WINDOW, MERGEBOT_BATCH_SIZE, MERGEBOT_RETRY_FAILED_CHECKS).

A rule that does not hold raises ``Invalid`` with a sentence a person can act on and the rule's name as ``field``,
never pydantic's own error: the CLI prints it, the API answers 422 with it.

Layer 0 (tests/test_layers.py), beside the records of ``mergebot.models``: it checks values, it reads and writes
nothing.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from mergebot import messages as say
from mergebot.errors import Invalid
from verifier import cache as caches
from verifier import outcomes as outcome_files
from verifier import view as views
from verifier.runner import DISK_LIMIT_MB, MEMORY_MB

CHECK_CONFIG = ["conftest.py", "pytest.ini", "tox.ini", "noxfile.py"]
TEST_PATHS = ["test_*.py", "*_test.py", "tests/", "test/", "conftest.py"]
HELD_OUT_COMMAND = 'python -m pytest -q -p no:cacheprovider "$VERIFIER_HELD_OUT"'
# How a landing reaches main: a merge commit (the candidate's commits kept as its second parent), or one squashed
# commit whose only parent is the previous main (issue 43). Either way it is exactly the commit the checks ran on.
MERGE_METHODS = ("merge", "squash")
# What a move of main that no landing statement explains does (issue 44): a finding (flag), or that and the queue
# paused until an admin resumes it (pause).
ON_UNATTESTED = ("flag", "pause")
RESETTABLE = ("setup_command", "post_land_command", "speculation_window", "batch_size", "retry_failed_checks",
              "require_approval")


def check_globs(globs: list[str] | None, option: str = "check-config", field: str | None = None) -> list[str] | None:
    """The globs of a repository's paths (``--check-config``, ``--tests``; None: the default list). ``field``: the
    rule's name, when it is not the option's."""
    if globs is None:
        return None
    name = field or option.replace("-", "_")
    out = [g.strip() for g in globs if g.strip()]
    for g in out:
        if g.startswith("/") or ".." in g.split("/") or len(g) > 500:
            raise Invalid(f"--{option} {g!r} is not a glob inside the repository", field=name)
    if len(out) > 100:
        raise Invalid(f"--{option}: at most 100 globs", field=name)
    return out


def check_report(report: str) -> str:
    """Where a repository's tests report: ``pytest`` (our plugin) or ``junit:PATH`` inside the checkout."""
    if report != "pytest" and outcome_files.junit_path(report) is None:
        raise Invalid(f"--report is pytest or junit:PATH (a path inside the checkout), not {report!r}", field="report")
    return report


def check_sandbox_paths(paths: list[str] | None) -> list[str]:
    """A repository's sandbox paths, normalized: absolute, never ``/``, ``/root``, ``/home`` or a whole home
    directory (bind what it holds instead), at most 50."""
    out = []
    for p in paths or []:
        norm = os.path.normpath(str(p))
        if not os.path.isabs(norm) or "\0" in norm or len(norm) > 4000:
            raise Invalid(f"sandbox path {p!r} is not an absolute path", field="sandbox_paths")
        if views.too_wide(norm):
            raise Invalid(f"sandbox path {p!r} would show a whole home directory or more to every check: give the "
                          "directories inside it that the check needs", field="sandbox_paths")
        out.append(norm)
    if len(out) > 50:
        raise Invalid("at most 50 sandbox paths", field="sandbox_paths")
    return list(dict.fromkeys(out))


def _inside(what: str, paths: list[str]) -> list[str]:
    """Cache paths and key files must be paths inside the checkout (``verifier.cache.valid_path``)."""
    bad = [p for p in paths if not caches.valid_path(str(p))]
    if bad:
        raise Invalid(f"{what} {bad[0]!r} is not a path inside the checkout (relative, no '..' or .git)", field=what)
    if len(paths) > 20:
        raise Invalid(f"{what}: at most 20 paths", field=what)
    return paths


def _between(low: int, high: int, sentence: str, field: str) -> Any:
    def check(v: int) -> int:
        if not low <= v <= high:
            raise Invalid(sentence, field=field)
        return v
    return check


def _one_of(choices: tuple[str, ...], option: str, field: str) -> Any:
    def check(v: str) -> str:
        if v not in choices:
            raise Invalid(f"--{option} is {' or '.join(choices)}, not {v!r}", field=field)
        return v
    return check


def _command(field: str, what: str) -> Any:
    def check(v: str) -> str:
        if not 1 <= len(v) <= 4000 or not v.strip():
            raise Invalid(f"{what} is a command of 1 to 4000 characters", field=field)
        return v
    return check


CHECK_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,39}$")
MAX_CHECKS = 10


def _own(field: str, kind: type) -> Any:
    """A check's own value of the repository's rule ``field``: of the rule's type, checked by the rule's check."""
    def check(v: Any) -> Any:
        if not isinstance(v, kind) or (isinstance(v, list) and not all(isinstance(p, str) for p in v)):
            raise Invalid(say.check_own_wrong_type(field), field="checks")
        return CHECKS[field](list(v) if isinstance(v, list) else v)
    return check


# What one named check may set for itself (issue 43: "its own timeout, cache, setup and report"), each overriding
# the repository's rule for that check only and checked as that rule is (``CHECKS``); absent or None: the repository's.
OWN_RULES: dict[str, Any] = {
    "timeout_s": None,  # checked in ``check_checks`` (say.check_bad_field)
    "setup": _own("setup_command", str),
    "cache_paths": _own("cache_paths", list),
    "cache_key": _own("cache_key", list),
    "report": _own("report", str),
}


def check_checks(v: list[Any]) -> list[dict[str, Any]]:
    """A repository's named checks (``--check NAME=COMMAND``), normalized: each ``{name, command, required,
    timeout_s}`` (``required`` true unless given; ``timeout_s`` None: the repository's ``verifier_timeout_s``), and
    the check's own ``setup``, ``cache_paths``, ``cache_key`` and ``report`` where it gives them (``OWN_RULES``:
    each checked as the repository's rule of that name; absent: the repository's), names short slugs and unique, at
    most ``MAX_CHECKS``. ``[]``: no named checks (the verifier command is the check)."""
    out: list[dict[str, Any]] = []
    for c in v:
        if not isinstance(c, dict):
            raise Invalid(say.check_not_a_record(c), field="checks")
        extra = sorted(set(c) - {"name", "command", "required", *OWN_RULES})
        if extra:
            raise Invalid(say.check_unknown_key(extra[0]), field="checks")
        name, command = c.get("name"), c.get("command")
        if not isinstance(name, str) or not CHECK_NAME.match(name):
            raise Invalid(say.check_bad_name(name), field="checks")
        if not isinstance(command, str) or not 1 <= len(command) <= 4000 or not command.strip():
            raise Invalid(say.check_bad_field(name, "command"), field="checks")
        required, timeout = c.get("required", True), c.get("timeout_s")
        if not isinstance(required, bool):
            raise Invalid(say.check_bad_field(name, "required"), field="checks")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)
                                    or not 1 <= timeout <= 86400):
            raise Invalid(say.check_bad_field(name, "timeout_s"), field="checks")
        if any(o["name"] == name for o in out):
            raise Invalid(say.check_twice(name), field="checks")
        try:
            own = {k: None if c.get(k) is None else OWN_RULES[k](c[k]) for k in OWN_RULES if k != "timeout_s"}
        except Invalid as e:
            raise Invalid(say.check_own_invalid(name, e.message), field="checks") from e
        out.append({"name": name, "command": command, "required": required, "timeout_s": timeout,
                    **{k: v for k, v in own.items() if v is not None}})
    if len(out) > MAX_CHECKS:
        raise Invalid(say.too_many_checks(MAX_CHECKS), field="checks")
    if out and not any(c["required"] for c in out):
        raise Invalid(say.NO_REQUIRED_CHECK, field="checks")
    return out


def _test_paths(v: list[str]) -> list[str]:
    out = check_globs(v, "tests") or []
    if not out:
        raise Invalid("--tests needs at least one glob: the paths a judging run takes from main", field="test_paths")
    return out


# Each rule's check, by name: run on a value given (never on None, which is "the default" or "unchanged").
CHECKS: dict[str, Any] = {
    "verifier_command": _command("verifier_command", "--verifier"),
    "verifier_timeout_s": _between(1, 86400, "the check's timeout is 1 to 86400 seconds", "verifier_timeout_s"),
    "max_push_bytes": _between(1, 1 << 62, "the push limit is a positive number of bytes", "max_push_bytes"),
    "max_file_bytes": _between(1, 1 << 62, "the file limit is a positive number of bytes", "max_file_bytes"),
    "cache_paths": lambda v: _inside("cache_paths", v),
    "cache_key": lambda v: _inside("cache_key", v),
    "setup_command": _command("setup_command", "--setup"),
    "post_land_command": _command("post_land_command", "--post-land-check"),
    "sandbox_paths": check_sandbox_paths,
    "disk_limit_mb": _between(16, 1 << 20, "the disk limit is between 16 MiB and 1 TiB", "disk_limit_mb"),
    "memory_limit_mb": _between(64, 1 << 20, "the memory limit is between 64 MiB and 1 TiB", "memory_limit_mb"),
    "report": check_report,
    "check_config": check_globs,
    "held_out_command": _command("held_out_command", "--held-out-command"),
    "old_tests": _one_of(("flag", "refuse", "run"), "old-tests", "old_tests"),
    "test_paths": _test_paths,
    "suspicious": _one_of(("flag", "refuse"), "suspicious", "suspicious"),
    "speculation_window": _between(0, 64, "--window is 0 (as wide as the verifier slots) to 64", "speculation_window"),
    "batch_size": _between(1, 64, "--batch is 1 to 64 candidates per run", "batch_size"),
    "merge_method": _one_of(MERGE_METHODS, "merge-method", "merge_method"),
    "require_approval": lambda v: check_globs(v, "require-approval"),
    "checks": check_checks,
    "on_unattested": _one_of(ON_UNATTESTED, "on-unattested", "on_unattested"),
    "union_merge": lambda v: check_globs(v, "union", "union_merge"),
}


class _Checked(BaseModel):
    """The checks every rule model shares: each value given goes through its rule's check (``CHECKS``), and a
    value of the wrong type is an ``Invalid`` naming the rule, never pydantic's ``ValidationError``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*")
    @classmethod
    def _check(cls, v: Any, info: Any) -> Any:
        check = CHECKS.get(info.field_name)
        return v if v is None or check is None else check(v)

    @classmethod
    def of(cls, **given: Any) -> Self:
        """The model of ``given`` (a rule given as None takes its default), checked."""
        try:
            return cls.model_validate({k: v for k, v in given.items() if v is not None})
        except ValidationError as e:
            raise invalid(e) from None


def invalid(e: ValidationError) -> Invalid:
    """Pydantic's first complaint as one sentence naming the rule."""
    err = e.errors()[0]
    name = str(err["loc"][0]) if err.get("loc") else "rules"
    if err["type"] == "extra_forbidden":
        return Invalid(f"{name!r} is not a repository rule", field=name)
    return Invalid(f"{name}: {err['msg'][0].lower()}{err['msg'][1:]}", field=name)


class Rules(_Checked):
    """Every rule of a repository, with its default (the columns of ``repos`` that are rules)."""

    verifier_command: str
    target_branch: str = "main"
    verifier_timeout_s: int = 600
    protected_paths: list[str] = []
    max_push_bytes: int = 100 << 20
    max_file_bytes: int = 10 << 20
    footprint_refuse: bool = False
    cache_paths: list[str] = []
    cache_key: list[str] = []
    setup_command: str | None = None
    setup_network: bool = False
    post_land_command: str | None = None
    sandbox_paths: list[str] = []
    disk_limit_mb: int = DISK_LIMIT_MB
    memory_limit_mb: int = MEMORY_MB
    report: str = "pytest"
    check_config: list[str] = CHECK_CONFIG
    held_out_command: str = HELD_OUT_COMMAND
    old_tests: str = "flag"
    risk_aware: bool = True
    test_paths: list[str] = TEST_PATHS
    suspicious: str = "flag"
    speculation_window: int | None = None  # None: the server's MERGEBOT_SPECULATION_WINDOW
    batch_size: int | None = None  # None: the server's MERGEBOT_BATCH_SIZE
    retry_failed_checks: bool | None = None  # None: the server's MERGEBOT_RETRY_FAILED_CHECKS
    merge_method: str = "merge"  # or "squash": one single-parent commit per landing
    require_approval: list[str] | None = None  # None: none needed; []: every change; else globs (``awaits_approval``)
    checks: list[dict[str, Any]] = []  # named checks (``check_checks``); []: the verifier command is the check
    on_unattested: str = "flag"  # a commit of main without a landing statement: a finding, or "pause" the queue too
    union_merge: list[str] = []  # globs of files whose conflicts the bot merges by union (besides main's attributes)

    @classmethod
    def of_repo(cls, repo: Any) -> Rules:
        """The rules a repository record (``models.Repo``) holds now, as stored (not checked again)."""
        return cls.model_construct(**{n: getattr(repo, n) for n in cls.model_fields})


class RulesChange(_Checked):
    """The rules ``repo set`` changes: None leaves a rule as it is; ``reset`` puts the optional ones named back to
    their default (no setup, main checked by the verifier command, the server's queue rules, no approval)."""

    verifier_command: str | None = None
    verifier_timeout_s: int | None = None
    protected_paths: list[str] | None = None
    footprint_refuse: bool | None = None
    cache_paths: list[str] | None = None
    cache_key: list[str] | None = None
    setup_command: str | None = None
    setup_network: bool | None = None
    post_land_command: str | None = None
    sandbox_paths: list[str] | None = None
    disk_limit_mb: int | None = None
    memory_limit_mb: int | None = None
    report: str | None = None
    check_config: list[str] | None = None
    held_out_command: str | None = None
    old_tests: str | None = None
    risk_aware: bool | None = None
    test_paths: list[str] | None = None
    suspicious: str | None = None
    speculation_window: int | None = None
    batch_size: int | None = None
    retry_failed_checks: bool | None = None
    merge_method: str | None = None
    require_approval: list[str] | None = None
    checks: list[dict[str, Any]] | None = None  # []: no named checks any more (``repo set --no-checks``)
    on_unattested: str | None = None
    union_merge: list[str] | None = None  # []: none any more (``repo set --no-union``)
    reset: frozenset[str] = frozenset()

    @field_validator("reset")
    @classmethod
    def _resettable(cls, v: frozenset[str]) -> frozenset[str]:
        for name in sorted(v - set(RESETTABLE)):
            raise Invalid(f"{name!r} has no default to go back to (only {', '.join(RESETTABLE)})", field="reset")
        return v

    def given(self) -> list[str]:
        """The rules this change sets or resets, by name."""
        names = type(self).model_fields
        return sorted({n for n in names if n != "reset" and getattr(self, n) is not None} | self.reset)

    def params(self) -> dict[str, Any]:
        """The store statement's parameters (``repo_update``): every rule (None: unchanged) and the resets."""
        out = {n: getattr(self, n) for n in type(self).model_fields if n != "reset"}
        return {**out, "reset": sorted(self.reset)}


@dataclass(frozen=True)
class QueueRules:
    """How the queue lands one repository's candidates. ``window``: runs in flight at most (0: as wide as the
    verifier slots the bot knows); ``batch``: candidates one run may cover; ``retry``: a failed check runs once
    more on the same commit before it counts."""

    window: int
    batch: int
    retry: bool

    def width(self, slots: int) -> int:
        """The widest window, given the verifier slots the bot knows now."""
        return max(1, slots) if self.window == 0 else self.window


def queue_rules(repo: Any, defaults: QueueRules) -> QueueRules:
    """A repository's queue rules: its own (``speculation_window``, ``batch_size``, ``retry_failed_checks``) where
    set, else the server's ``defaults``."""
    window, batch, retry = (getattr(repo, n, None) for n in ("speculation_window", "batch_size",
                                                              "retry_failed_checks"))
    return QueueRules(defaults.window if window is None else int(window),
                      defaults.batch if batch is None else int(batch),
                      defaults.retry if retry is None else bool(retry))


def touches(paths: Iterable[str], globs: Iterable[str]) -> bool:
    """Whether any of ``paths`` is one of ``globs``: a glob names a path and everything under it (``docs`` and
    ``docs/`` alike), matches as an ``fnmatch`` pattern on the whole path (``src/*.py``, its ``*`` crossing folders
    as ``--protect``'s does), and a glob without ``/`` matches a file's name in any folder (``*.sql``)."""
    rules = list(globs)
    for path in paths:
        for g in rules:
            folder = g.rstrip("/") + "/"
            if (path + "/").startswith(folder) or fnmatch.fnmatchcase(path, g):
                return True
            if "/" not in g and fnmatch.fnmatchcase(posixpath.basename(path), g):
                return True
    return False


def awaits_approval(require: list[str] | None, paths: Iterable[str], approvers: Iterable[str]) -> bool:
    """Whether a candidate that passed its checks must wait for an approval before it lands: its repository requires
    one (``require_approval``: ``[]`` for every change, else for a change that ``touches`` one of its globs) and no
    one has approved its exact commit yet (``approvers``: who did, by name). Pure: the gate of every landing path
    (``mergebot.landing.main.land``) asks it."""
    if require is None or any(True for _ in approvers):
        return False
    return not require or touches(paths, require)
