"""What an agent (or a lead) is told by its own command line and worktree: ``mergebot start``, ``stop``, ``submit``,
``create``, ``allow``, before or after the server answers. A refusal the server sends is worded elsewhere
(``push``, ``queue``, ``access``); these are the sentences the command itself says.

Part of ``mergebot.messages``: its rules hold here. A sentence that stops a command names the command that mends
it.
"""

from __future__ import annotations

import re as _re
import shlex as _shlex
from collections.abc import Mapping, Sequence
from typing import Any

# -- the worktree (``mergebot.agent``) -----------------------------------------------------------------------------


def not_a_worktree(workdir: object) -> str:
    return f"{workdir} is not in a git worktree; run `mergebot start --repo NAME --dir DIR` first"


def not_a_mergebot_worktree(workdir: object, key: str) -> str:
    return f"{workdir} is not a mergebot worktree (no {key}); run `mergebot start --repo NAME --dir DIR` first"


def no_such_repo_here(repo: str, names: Sequence[str]) -> str:
    return (f"no repository named {repo!r} on this server (it has: {', '.join(names) or 'none'}); "
            "`mergebot repo list` lists them")


def worktree_dirty(workdir: object, dirty: Sequence[str]) -> str:
    return (f"{workdir} has uncommitted changes ({', '.join(dirty[:5])}): commit them (and "
            "`mergebot submit`), or stash them, before `mergebot start`")


def worktree_unlanded(workdir: object, n: int, branch: str, repo: str) -> str:
    return (f"{workdir} holds {n} commit(s) on {branch} that are not on main. Push them on their claim "
            f"(`mergebot submit --dir {workdir}`), or put them on the next claim's branch (`mergebot "
            f"start --repo {repo} --dir {workdir} --carry`), or start in another directory (`--dir`).")


def worktree_not_prepared(error: object) -> str:
    """The reason a claim is given back with when its worktree could not be set up."""
    return f"the worktree could not be prepared: {error}"


# -- ``mergebot start`` and ``stop`` -------------------------------------------------------------------------------


NOTHING_READY = "nothing is ready"


def nothing_ready(waited: float) -> str:
    """``mergebot start``'s answer when no claim came, having waited ``waited`` s (0: not at all)."""
    return NOTHING_READY + (f" (waited {waited:g} s)" if waited else "; `mergebot start --wait 60` waits for work")


OVERLAPS_HEADING = "in flight and may touch the same paths (talk to them, or expect a conflict):"
HANDOFF_HEADING = "handoff notes from earlier owners:"


def overlap_line(subtask_id: int, title: str, status: str, owner: str, paths: Sequence[str]) -> str:
    return f"  subtask {subtask_id} {title!r} ({status}, {owner}): {', '.join(paths[:5])}"


def carried(commits: int, branch: str, onto: str) -> str:
    return f"carried {commits} commit(s) from {branch} onto {onto}: they are on the new claim's branch now."


def keeper_running(pid: int, idle_minutes: float) -> str:
    return (f"the claim is kept alive while you work (keeper pid {pid}, idle limit "
            f"{idle_minutes:.0f} min); `mergebot stop` lets it go, `mergebot status` shows it.")


KEEPER_STOPPED = ("the keeper stopped: the claim lapses after its lease unless you heartbeat or "
                  "`mergebot start --carry` again")
NO_KEEPER = "no keeper was running here"

# -- ``mergebot submit`` / ``push`` ----------------------------------------------------------------------------------


def landed(sha: str, merged_sha: object) -> str:
    return f"landed: {sha[:12]} is on main as {str(merged_sha)[:12]}"


def push_next(step: str) -> str:
    return f"next: {step}"


NO_SANDBOX = "sandbox: none (the check ran without isolation: the operator set MERGEBOT_SANDBOX=none)"
SUBMIT_NEEDS_VERSION = "mergebot submit ID needs --version (your claim version)"

# -- ``mergebot create`` and ``allow`` -------------------------------------------------------------------------------

CREATE_PREFIX = "mergebot create: "  # what each of its refusals starts with
CREATE_NEEDS_TITLE = CREATE_PREFIX + "give a TITLE or --file"
CREATE_NEEDS_REPO = CREATE_PREFIX + "name the repository the acceptance tests are for (--repo)"


def create_bad_acceptance(spec: object) -> str:
    return f"{CREATE_PREFIX}an acceptance test is LOCAL_FILE:REPO_PATH, not {spec!r}"


def create_unreadable_acceptance(local: str, why: object) -> str:
    return f"{CREATE_PREFIX}cannot read the acceptance test {local}: {why}"


ALLOW_NEEDS_WHAT = ("mergebot allow: say what to allow (--test-removal, --check-changes, --behaviour-change; "
                    "--no-... takes it back)")

# -- ``mergebot claim`` and ``wait`` ---------------------------------------------------------------------------------

CLAIM_HANDOFF_HEADING = "handoff notes:"


def wait_progress(done: int, total: int, statuses: dict[str, str]) -> str:
    return f"{done}/{total} finished: " + " ".join(f"{k}={v}" for k, v in sorted(statuses.items()))


# -- the keeper (``mergebot.agent.keeper``): why it stopped keeping the claim alive -------------------------------

KEEPER_WORKTREE_REMOVED = "the worktree was removed"
KEEPER_NOT_A_WORKTREE = "the worktree is no longer a mergebot worktree"
KEEPER_SUBTASK_LANDED = "the subtask landed"
KEEPER_CLAIM_RELEASED = "the claim was released (or its lease lapsed) and the subtask is ready again"


def keeper_server_silent(seconds: float, error: object) -> str:
    return f"the server has not answered for {seconds:.0f} s ({error})"


def keeper_worktree_moved_on(subtask_id: int, claim_version: int) -> str:
    return f"the worktree now holds subtask {subtask_id} v{claim_version}"


def keeper_agent_idle(idle_minutes: float, limit_minutes: float) -> str:
    return (f"the agent has been idle for {idle_minutes:.0f} min (MERGEBOT_AGENT_IDLE is {limit_minutes:.0f} "
            "min): no file changed, no commit, no mergebot command in the worktree. The lease now lapses as "
            "for a silent agent; run `mergebot start --carry` in the worktree to claim again.")


def keeper_claim_gone(message: str) -> str:
    return f"the claim is gone: {message}"


def keeper_stopped(at: str, why: str) -> str:
    """The last line of the keeper's log."""
    return f"{at} keeper stopped: {why}"


# -- following a push to its verdict (``mergebot.agent.submit``) ----------------------------------------------------


def candidate_progress(subtask_id: int, cand_id: object, status: str) -> str:
    return f"subtask {subtask_id}: candidate {cand_id} {status}"


def no_verdict_yet(wait: float, status: str | None, subtask_id: int) -> str:
    """``status``: the candidate's, None while it is on its way to the queue (a forge's push)."""
    return (f"no verdict within {wait:.0f}s; it is still "
            f"{status if status is not None else 'on its way to the queue'} (`mergebot wait {subtask_id}`)")


PUSH_FAILED_NEXT = "read git's message; check `mergebot status` and the token"


def nothing_pushed(subtask_id: int, sha: str, last: Mapping[str, Any] | None) -> str:
    """git pushed nothing: the branch already held ``sha``; ``last``: its last candidate (``id``, ``status``)."""
    return (f"nothing was pushed: subtask {subtask_id}'s branch already holds {sha[:12]}"
            + (f", whose candidate {last['id']} was {last['status']}" if last else "")
            + ". Commit a change and `mergebot submit`, or `mergebot submit --again` to queue it once more.")


UNCHANGED_NEXT = "`mergebot submit --again`"


# -- the command line as a whole (``mergebot.cli``): Ctrl-C, a server out of reach, what ``wait`` and ``start`` end
# with --------------------------------------------------------------------------------------------------------------

INTERRUPTED = "mergebot: interrupted (Ctrl-C)"


def still_queued(subtask_id: int, cand_id: int | None) -> str:
    """Ctrl-C while ``mergebot submit`` waited for its verdict: the push stands (``main`` puts ``mergebot: `` first)."""
    what = f"candidate {cand_id}" if cand_id is not None else "its push"
    return (f"interrupted: only the waiting stopped. Subtask {subtask_id}'s {what} is still in the queue: "
            f"`mergebot wait {subtask_id}` follows it to its verdict")


def cannot_reach_server(url: str, error: object) -> str:
    return (f"mergebot: cannot reach the server at {url} ({error}); is `mergebot serve` running there? "
            "--server or MERGEBOT_URL sets the URL")


def start_nothing_ready(waited: float) -> str:
    """``nothing_ready`` as the last line of ``mergebot start`` (which then exits 4, as ``wait`` does when what it
    waited for did not come)."""
    return "mergebot start: " + nothing_ready(waited)


def wait_verdict(done: bool, statuses: Mapping[str, str], timeout: float) -> str:
    """``mergebot wait``'s last line: each subtask's status, and whether they all finished."""
    each = ", ".join(f"subtask {k} {v}" for k, v in sorted(statuses.items(), key=lambda kv: int(kv[0])))
    if done:
        return f"finished: {each}"
    return f"not finished within {timeout:g} s: {each} (`mergebot wait` again to go on waiting)"


# -- the keeper, asked to stop (``mergebot.agent.keeper.Stopped``) ----------------------------------------------------

KEEPER_STOP_ASKED = "it was asked to stop (`mergebot stop`, or a release through the MCP tools)"
KEEPER_REPLACED = "`mergebot start` was run again in this worktree: that start's own keeper keeps its claim"
KEEPER_NOTE_PREFIX = "[keeper] "  # the board leaves these notes out (``page_notes``, ``note_list``: the same text)


def keeper_note(subtask_id: int, claim_version: int, why: str) -> str:
    """The note the keeper leaves on its subtask when it stops: for the subtask's next owner, not for the board."""
    return f"{KEEPER_NOTE_PREFIX}stopped keeping the claim on subtask {subtask_id} v{claim_version}: {why}"


# -- where a worktree is (``mergebot.agent.worktree``, ``mergebot status``) -------------------------------------------


def no_such_dir(workdir: object) -> str:
    return (f"{workdir} does not exist; give the worktree's directory (`--dir`), or `mergebot start --repo NAME "
            "--dir DIR` to make one")


def head_elsewhere(head: str | None, branch: str) -> str:
    """``mergebot status`` when HEAD is not on the claim's branch: both, and where ``submit`` pushes."""
    on = f"HEAD is on {head}" if head else "HEAD is detached"
    return (f"{on}, not on the claim's branch {branch}: `mergebot submit` pushes HEAD to {branch} all the same "
            f"(`git switch {branch}` to work on it)")


# -- ``mergebot submit`` in the middle of a git operation, a conflict's hunks, and ``next`` for a worktree ------------

_FINISH = {"rebase": ("resolve the conflicts, `git add` the files and `git rebase --continue` until it ends",
                      "`git rebase --abort` goes back to where you were"),
           "merge": ("resolve the conflicts, `git add` the files and `git commit` to conclude it",
                     "`git merge --abort` goes back"),
           "cherry-pick": ("resolve the conflicts, `git add` the files and `git cherry-pick --continue`",
                           "`git cherry-pick --abort` goes back"),
           "revert": ("resolve the conflicts, `git add` the files and `git revert --continue`",
                      "`git revert --abort` goes back")}


def submit_unfinished(workdir: object, operation: str) -> str:
    """``mergebot submit`` in a worktree git has stopped mid-``operation`` (a rebase, a merge...): nothing pushed."""
    finish, undo = _FINISH.get(operation, _FINISH["rebase"])
    return (f"{workdir} is in the middle of a {operation}, so nothing was pushed (HEAD is not your finished work): "
            f"{finish}, then `mergebot submit` ({undo})")


def conflict_path(path: str, lines: Sequence[int], deleted: str | None) -> str:
    """A conflicting path of a conflict verdict (``mergebot.git.changes.conflict_hunks``): where its hunks start in the
    merged file; ``deleted``: ``ours`` (the target branch deleted it) or ``theirs`` (the change did)."""
    where = f" (conflicts from line {', '.join(str(n) for n in lines)})" if lines else ""
    gone = {"ours": ": the target branch deleted it, the change edits it",
            "theirs": ": the change deletes it, the target branch edits it"}
    return f"{path}{where}{gone.get(deleted or '', '' if lines else ': it conflicts as a whole')}"


CONFLICT_SIDES = "in each hunk, the lines above ======= are the target branch's, the lines below are the change's"


def for_worktree(step: str, *, repo: str, workdir: str, subtask_id: int | None) -> str:
    """A verdict's ``next`` as ``mergebot submit`` or ``status`` prints it in a worktree: the placeholders the
    server leaves (``REPO``, ``DIR``, ``ID``) filled with what the command knows, and the worktree's own flow
    (``mergebot start``) where the no-git one (``mergebot claim``) is named."""
    start = f"mergebot start --repo {_shlex.quote(repo)} --dir {_shlex.quote(workdir)}"
    step = step.replace("`mergebot claim`", f"`{start}`")
    filled = {"REPO": _shlex.quote(repo), "DIR": _shlex.quote(workdir)}
    if subtask_id is not None:
        filled["ID"] = str(subtask_id)
    return _re.sub(r"(?<![\w/-])(REPO|DIR|ID)(?![\w/-])", lambda m: filled.get(m.group(1), m.group(1)), step)


# -- ``mergebot wait --commit`` (issue 45) ---------------------------------------------------------------------------

WAIT_COMMIT_ONE_ID = ("`mergebot wait --commit SHA` waits on one subtask: give its ID, or run it in the worktree "
                      "of your claim (`--dir`)")
WAIT_NEEDS_WHAT = ("`mergebot wait` needs subtask IDs, or runs in the worktree of your claim (`--dir`) to wait on "
                   "its HEAD's verdict")


def commit_progress(subtask_id: int, sha: str, status: str, candidate_id: int | None) -> str:
    what = f"candidate {candidate_id}" if candidate_id is not None else "no candidate yet"
    return f"subtask {subtask_id} at {sha[:12]}: {status} ({what})"


def commit_not_decided(timeout: float, subtask_id: int, sha: str, status: str) -> str:
    """``mergebot wait --commit``'s last line when the commit has no verdict within its wait."""
    return (f"no verdict on {sha[:12]} within {timeout:g} s: it is {status} "
            f"(`mergebot wait {subtask_id} --commit {sha[:12]}` again to go on waiting)")
