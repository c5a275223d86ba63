"""The queue's controls on the command line (issue 43): ``mergebot retry``, ``cancel``, ``priority``, ``pause`` and
``resume``, each run as a person runs it (a fresh process, MERGEBOT_URL and MERGEBOT_TOKEN) against a real
``mergebot serve``, and what it changed read back from the database. A role that may not, or a subtask or
repository that does not exist, is refused with one sentence and an exit code, never a traceback.

And the exit codes: README.md and the guide hold one table of them, the same in both, and it is the set of codes
the CLI's code can exit with (read from the code, so a code added or changed without the table fails here).
"""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mergebot import messages as say
from mergebot.auth import Role
from tests.support.bot import Fleet, check_command, commit, until
from tests.test_agents import SHORT_LEASE, cli

ROOT = Path(__file__).resolve().parent.parent
QUIET = 3.0  # seconds a queue that is not held would need to verify and land a one-line change here


async def fleet_with_lead(make_fleet: Callable[..., Any], **env: str) -> Fleet:
    """A fleet (root the admin, ann and bob the agents, repository ``demo``) with a lead as well."""
    fleet: Fleet = await make_fleet(check_command(), **env)
    _, fleet.tokens["lead"] = await fleet.db.agents.add_agent(name="lead", role=Role.LEAD)
    return fleet


async def waiting(fleet: Fleet, subtask_id: int) -> dict[str, Any]:
    """The subtask's newest candidate, once it waits in the queue."""
    got: dict[str, Any] = {}

    async def queued() -> bool:
        rows = await fleet.db.landing.candidates(repo="demo", subtask_id=subtask_id)
        if rows and rows[0]["status"] == "queued":
            got.update(rows[0])
        return bool(got)

    await until(queued, timeout=60)
    return got


async def landed(fleet: Fleet, subtask_id: int) -> None:
    async def done() -> bool:
        return (await fleet.db.subtasks.get_subtask(subtask_id)).status == "landed"

    await until(done, timeout=90)


def refused(out: Any, code: int, *sentences: str) -> None:
    """The command was refused with exit ``code``, and said each of ``sentences`` on stderr."""
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert out.stderr.startswith("mergebot: refused"), out.stderr
    for s in sentences:
        assert s in out.stderr, (s, out.stderr)


async def test_pause_holds_a_push_in_the_queue_and_resume_lands_it(make_fleet: Callable[..., Any]) -> None:
    fleet = await fleet_with_lead(make_fleet)
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="held")
    out = cli(fleet, "root", "pause", "--repo", "demo", "--reason", "release freeze")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == say.landing_paused("demo", "paused by root: release freeze")
    repo = await fleet.db.repos.get_repo("demo")
    assert repo.paused and repo.paused_reason == "paused by root: release freeze"

    main = fleet.main()
    _, _, sha = fleet.start_and_push("ann", {"held.txt": "held\n"})
    cand = await waiting(fleet, sub.id)
    assert cand["sha"] == sha
    await asyncio.sleep(QUIET)
    rows = await fleet.db.landing.candidates(repo="demo", subtask_id=sub.id)
    assert [r["status"] for r in rows] == ["queued"] and fleet.main() == main
    assert (await fleet.db.subtasks.get_subtask(sub.id)).status == "submitted"
    view = json.loads(cli(fleet, "ann", "queue", "--repo", "demo", "--json").stdout)
    assert view["repos"][0]["paused"] is True and view["repos"][0]["paused_reason"].endswith("release freeze")
    assert [w["id"] for w in view["waiting"]] == [cand["id"]]

    out = cli(fleet, "root", "resume", "--repo", "demo")
    assert out.returncode == 0 and out.stdout.strip() == say.landing_resumed("demo"), out.stdout + out.stderr
    await landed(fleet, sub.id)
    assert fleet.main() != main and not (await fleet.db.repos.get_repo("demo")).paused


async def test_only_an_admin_pauses_and_only_a_repository_that_exists(make_fleet: Callable[..., Any]) -> None:
    fleet = await fleet_with_lead(make_fleet)
    for who in ("ann", "lead"):
        for action in ("pause", "resume"):
            refused(cli(fleet, who, action, "--repo", "demo"), 1, "403", say.role_may_not(
                "agent" if who == "ann" else "lead", "admin"))
    assert not (await fleet.db.repos.get_repo("demo")).paused
    for action in ("pause", "resume"):
        refused(cli(fleet, "root", action, "--repo", "nope"), 1, "404", say.no_such_repository("nope"))
    # what landed on a repository that does not exist is an error like its queue, not an empty list (item 13)
    queue, landed_rows = (cli(fleet, "ann", view, "--repo", "nope") for view in ("queue", "landed"))
    refused(queue, 1, say.no_such_repository("nope"))
    refused(landed_rows, queue.returncode, say.no_such_repository("nope"))
    assert "(none)" not in landed_rows.stdout
    out = cli(fleet, "ann", "landed", "--repo", "demo", "--json")  # a repository with nothing landed yet: empty
    assert out.returncode == 0 and json.loads(out.stdout) == {"landed": []}, out.stdout + out.stderr
    out = cli(fleet, "root", "pause")  # no --repo: the parser's usage error
    assert out.returncode == 2 and "--repo" in out.stderr and "Traceback" not in out.stderr


async def test_priority_moves_a_waiting_candidate_and_cancel_ends_a_subtask(make_fleet: Callable[..., Any]) -> None:
    fleet = await fleet_with_lead(make_fleet)
    first, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="ann's")
    second, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="bob's")
    out = cli(fleet, "root", "pause", "--repo", "demo", "--json")  # both wait, so their order shows
    assert json.loads(out.stdout)["repo"]["paused_reason"] == "paused by root", out.stdout + out.stderr
    fleet.start_and_push("ann", {"ann.txt": "ann\n"})
    ann = await waiting(fleet, first.id)
    fleet.start_and_push("bob", {"bob.txt": "bob\n"})
    bob = await waiting(fleet, second.id)
    view = json.loads(cli(fleet, "ann", "queue", "--repo", "demo", "--json").stdout)
    assert [w["id"] for w in view["waiting"]] == [ann["id"], bob["id"]]  # first come, first served

    out = cli(fleet, "lead", "priority", str(second.id), "100")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == say.priority_set(second.id, 100, 1)
    assert (await fleet.db.subtasks.get_subtask(second.id)).priority == 100
    assert (await fleet.db.landing.get_candidate(bob["id"])).priority == 100
    view = json.loads(cli(fleet, "ann", "queue", "--repo", "demo", "--json").stdout)
    assert [w["id"] for w in view["waiting"]] == [bob["id"], ann["id"]]
    out = cli(fleet, "root", "priority", str(second.id), "-5", "--json")  # an admin may too; --json is the API's
    got = json.loads(out.stdout)
    assert (got["subtask"]["priority"], got["candidates_moved"]) == (-5, 1), out.stdout + out.stderr

    manage = say.role_may_not("agent", "manage_subtasks")
    refused(cli(fleet, "bob", "priority", str(second.id), "1000"), 1, "403", manage)  # an owner moves itself? no
    refused(cli(fleet, "lead", "priority", str(second.id), "5000"), 2, "422")  # out of -1000..1000
    refused(cli(fleet, "lead", "priority", "999", "1"), 1, "404", say.no_such_subtask(999))
    assert (await fleet.db.subtasks.get_subtask(second.id)).priority == -5

    refused(cli(fleet, "ann", "cancel", str(first.id)), 1, "403")  # not even its owner: a lead's move
    refused(cli(fleet, "lead", "cancel", "999"), 1, "404", say.no_such_subtask(999))
    out = cli(fleet, "lead", "cancel", str(first.id), "--reason", "done elsewhere")
    assert out.returncode == 0 and out.stdout.strip() == say.cancelled(first.id), out.stdout + out.stderr
    cancelled = await fleet.db.subtasks.get_subtask(first.id)
    assert (cancelled.status, cancelled.status_reason, cancelled.owner) == ("cancelled", "done elsewhere", None)
    refused(cli(fleet, "lead", "cancel", str(first.id)), 1, "409", say.cannot_cancel(first.id, "cancelled"))

    assert cli(fleet, "root", "resume", "--repo", "demo").returncode == 0
    await landed(fleet, second.id)
    assert (await fleet.db.subtasks.get_subtask(first.id)).status == "cancelled"
    assert (await fleet.db.landing.get_candidate(ann["id"])).status != "landed"
    assert [r.subtask_id for r in await fleet.db.landing.landed(repo="demo")] == [second.id]


async def test_retry_gives_a_failed_subtask_another_round_that_lands(make_fleet: Callable[..., Any]) -> None:
    fleet = await fleet_with_lead(make_fleet, **SHORT_LEASE)
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="poison pill", max_attempts=1)
    refused(cli(fleet, "lead", "retry", str(sub.id)), 1, "409", say.nothing_to_retry(sub.id, "ready"))
    fleet.start("ann")  # claimed without a keeper: the lease lapses, its one attempt is spent

    async def failed() -> bool:
        return (await fleet.db.subtasks.get_subtask(sub.id)).status == "failed"

    await until(failed, timeout=30)
    refused(cli(fleet, "ann", "retry", str(sub.id)), 1, "403", say.role_may_not("agent", "manage_subtasks"))
    refused(cli(fleet, "lead", "retry", "999"), 1, "404", say.no_such_subtask(999))
    out = cli(fleet, "lead", "retry", str(sub.id), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["subtask"]["status"] == "ready"
    again = await fleet.db.subtasks.get_subtask(sub.id)
    assert (again.status, again.attempts, again.status_reason) == ("ready", 0, say.by_command_line("retry"))

    wt = fleet.work / "ann-again"  # the next round is a real one: claimed, pushed, verified, landed
    out = cli(fleet, "ann", "start", "--repo", "demo", "--dir", str(wt))
    assert out.returncode == 0, out.stdout + out.stderr
    commit(wt, {"fixed.txt": "fixed\n"})
    out = cli(fleet, "ann", "submit", "--dir", str(wt))
    assert out.returncode == 0 and out.stdout.startswith("landed"), out.stdout + out.stderr
    assert (await fleet.db.subtasks.get_subtask(sub.id)).status == "landed"


# -- the exit codes -------------------------------------------------------------------------------------------------


def exit_codes_in_code() -> set[int]:
    """Every code ``mergebot`` can exit with, read from the CLI's source: the whole numbers a ``SystemExit(...)``
    or ``sys.exit(...)`` there can be given (through ``a if c else b``, too), 1 for a sentence given instead (Python
    prints it and exits 1), and argparse's 2 for a usage error and 0 for success, which no line of ours says."""
    codes = {0, 2}

    def values(node: ast.expr) -> set[int]:
        if isinstance(node, ast.IfExp):
            return values(node.body) | values(node.orelse)
        if isinstance(node, ast.Constant):
            return {node.value} if isinstance(node.value, int) else {1}
        if isinstance(node, ast.JoinedStr) or ast.unparse(node).startswith("say."):
            return {1}  # a sentence
        return set()  # a value computed elsewhere: drill.run's 0 or 1

    for path in [*(ROOT / "mergebot" / "cli").glob("*.py"), ROOT / "mergebot" / "__main__.py"]:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call) and node.args and ast.unparse(node.func) in ("SystemExit", "sys.exit"):
                codes |= values(node.args[0])
    return codes


def exit_code_table(path: Path) -> list[str]:
    """The rows of the one table headed ``| Exit code |`` in ``path``."""
    lines = path.read_text("utf-8").splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("| Exit code |")]
    assert len(heads) == 1, f"{path.name}: {len(heads)} tables of exit codes"
    rows = []
    for line in lines[heads[0] + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_exit_codes_table_is_the_same_in_readme_and_guide_and_is_the_codes_the_cli_uses() -> None:
    readme, guide = (exit_code_table(p) for p in (ROOT / "README.md", ROOT / "mergebot" / "guide.md"))
    assert readme == guide
    documented = [int(row.split("|")[1]) for row in readme]
    assert documented == sorted(documented), "in order, please"
    assert set(documented) == exit_codes_in_code()
    assert {1, 2, 3, 4, 5, 6, 130} <= set(documented)  # the ones item 13 found documented nowhere
