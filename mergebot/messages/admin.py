"""What an operator is told by the admin command line (``mergebot.cli.admin``): ``init`` and ``agent add`` showing a
token once, ``repo add`` and ``repo set`` given too little or too much, ``verifier worker``, ``verify`` and ``drill``
starting or missing what they need. A refusal the server sends is worded elsewhere (``setup``, ``lookups``); these
are the sentences the command itself says.

Part of ``mergebot.messages``: its rules hold here. A sentence that stops a command names the command (or the
option) that mends it.
"""

from __future__ import annotations

from mergebot.messages.lookups import no_such_repository

# -- ``mergebot init`` and ``agent add`` -----------------------------------------------------------------------------

ADMIN_TOKEN_EXISTS = "(exists; use 'mergebot agent rotate' for a new token)"
INIT_TOKEN_SHOWN_ONCE = "(the token is shown once: only its hash is stored; keep it now)"
TOKEN_SHOWN_ONCE = "(the token is shown once; store it now)"

# -- ``mergebot repo add`` and ``repo set`` -------------------------------------------------------------------------

GITHUB_APP_NEEDS_GITHUB = "mergebot: a GitHub App (--github-app-id, --github-app-key-env) is for a --github repository"
REPO_ADD_ONE_SOURCE = "mergebot: give one of --from, --github, --gitea, --forgejo"
REPO_SET_NEEDS_A_RULE = "mergebot repo set: give at least one rule to change (see --help)"

# -- ``mergebot verifier worker`` -----------------------------------------------------------------------------------

WORKER_NEEDS_TOKEN = "mergebot verifier worker needs a verifier token (--token or MERGEBOT_TOKEN)"
WORKER_PREFIX = "verifier worker: "  # what each line the running worker says starts with
WORKER_NO_SANDBOX = (WORKER_PREFIX + "MERGEBOT_SANDBOX=none: checks run WITHOUT a sandbox, with the whole machine "
                     "in view")


def worker_starting(slots: int, server: str, work: object) -> str:
    return WORKER_PREFIX + f"{slots} slot(s) against {server}, work dir {work}"


def worker_sandbox_broken(problem: str) -> str:
    return WORKER_PREFIX + f"every check is refused until the sandbox works: {problem}"


# -- ``mergebot verify`` and ``drill`` ------------------------------------------------------------------------------

VERIFY_PREFIX = "mergebot verify: "  # what each of its refusals starts with


def verify_no_such_repository(repo: str) -> str:
    """``lookups.no_such_repository``, as ``mergebot verify`` says it."""
    return VERIFY_PREFIX + no_such_repository(repo)


def verify_the_check(repo: str, command: str) -> str:
    """The heading of ``mergebot verify --explain-sandbox``: which check the explanation is for."""
    return f"repository {repo}: the check `{command}`"


VERIFY_NEEDS_COMMIT = VERIFY_PREFIX + "give the commit to check (or --explain-sandbox)"
DRILL_NEEDS_TOKEN = "mergebot drill needs a token (--token or MERGEBOT_TOKEN): an admin's; any role's with --check-only"


# -- the queue's controls: ``mergebot retry``, ``cancel``, ``priority``, ``pause``, ``resume`` ----------------------


def by_command_line(command: str) -> str:
    """The reason recorded for what a control changed when its ``--reason`` was not given."""
    return f"`mergebot {command}` on the command line"


def landing_paused(repo: str, reason: str | None) -> str:
    return (f"landing on {repo} is paused ({reason or 'by an admin'}): pushes still queue, nothing is verified "
            f"or lands until `mergebot resume --repo {repo}`.")


def landing_resumed(repo: str) -> str:
    return f"landing on {repo} resumed: parked candidates go back to the queue."


# -- ``mergebot serve`` starting, and the name ``agent add`` is given ------------------------------------------------


def serve_cannot_listen(host: str, port: int, why: object) -> str:
    return (f"mergebot serve: cannot listen on {host}:{port} ({why}): is another server there? Choose another port "
            "with --port (or MERGEBOT_PORT), and point agents at it with MERGEBOT_URL")


def serve_no_agents(where: object) -> str:
    return (f"the database ({where}) has no agents, so every token is refused: a new or mistyped --data-dir? "
            "`mergebot init` (with the same --data-dir) makes the admin and prints its token")


def agent_name_malformed(name: str) -> str:
    return (f"{name!r} is not an agent name: 1 to 64 letters, digits, '.', '_' and '-', the first a letter or digit "
            "(for example ann or ci-bot.2)")


# -- what ``repo add`` and ``repo set`` print ------------------------------------------------------------------------


def repo_summary(name: str, verb: str, rules: list[tuple[str, object]], held_out: int | None) -> str:
    """A repository just added or changed, with each rule that is not its default."""
    lines = [f"repository {name} {verb}; its rules (those not at their default):"]
    lines += [f"  {k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in rules]
    if held_out is not None:
        lines.append(f"  held-out check files: {held_out}")
    lines.append("every rule, defaults too: `mergebot repo list --json`")
    return "\n".join(lines)


# -- named checks (``repo add/set --check NAME=COMMAND``, issue 43) ---------------------------------------------------

NO_REQUIRED_CHECK = ("every named check is optional: at least one must be required (--check), or nothing would "
                     "ever judge a candidate")
CHECKS_NEED_COMMAND = ("mergebot repo add: give the check: --verifier COMMAND, or one --check NAME=COMMAND per "
                       "named check (for example --check lint='ruff check .' --check unit='python -m pytest -q')")


def check_not_a_record(given: object) -> str:
    return f"a named check is a record with name and command (and required, timeout_s), not {given!r}"


def check_unknown_key(key: str) -> str:
    return f"{key!r} is not part of a named check: name, command, required (default true), timeout_s"


def check_bad_name(name: object) -> str:
    return (f"{name!r} is not a check name: 1 to 40 lower-case letters, digits, '_', '.' and '-', the first a letter "
            "or digit (for example lint, types, unit)")


# What each field of a named check must be, said when it is not (``check_bad_field``).
CHECK_FIELDS = {
    "command": "its command is 1 to 4000 characters (--check {name}=COMMAND)",
    "required": "required is true or false",
    "timeout_s": "its timeout is 1 to 86400 seconds (none: the repository's --timeout)",
}


def check_bad_field(name: str, field: str) -> str:
    return f"check {name!r}: " + CHECK_FIELDS[field].format(name=name)


def check_twice(name: str) -> str:
    return f"check {name!r} is named twice: each named check needs a name of its own"


def too_many_checks(most: int) -> str:
    return f"at most {most} named checks per repository (glue the smallest ones into one command)"


def check_option_malformed(given: str) -> str:
    return (f"--check takes NAME=COMMAND (for example --check lint='ruff check .'), not {given!r}")


def check_line(check: dict[str, object]) -> str:
    """One named check as ``repo add`` / ``repo set`` print it."""
    timeout = f", {check['timeout_s']} s" if check.get("timeout_s") else ""
    kind = "required" if check.get("required", True) else "optional"
    own = "".join(f", {word} {', '.join(map(str, v)) if isinstance(v, list) else v}"
                  for word, v in (("setup:", check.get("setup")), ("cache:", check.get("cache_paths")),
                                  ("cache key:", check.get("cache_key")), ("report:", check.get("report"))) if v)
    return f"{check.get('name')} ({kind}{timeout}{own}): {check.get('command')}"


def check_own_wrong_type(field: str) -> str:
    return f"its {field} is {'a list of paths' if field in ('cache_paths', 'cache_key') else 'text'}"


def check_own_invalid(name: str, why: str) -> str:
    return f"check {name!r}: {why} (a check's own rule, given for that check only)"


def check_rule_malformed(option: str, given: str) -> str:
    value = "SECONDS" if option == "--check-timeout" else "PATH" if option == "--check-cache" else "VALUE"
    return f"{option} takes NAME={value}, the name of a named check and its own value, not {given!r}"


def check_rule_unknown(option: str, name: str, checks: list[str]) -> str:
    known = f"its named checks are {', '.join(checks)}" if checks else "the repository has no named checks"
    return (f"{option} names {name!r}, which is no named check: give a check's name from --check or "
            f"--optional-check ({known})")
