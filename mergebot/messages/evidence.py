"""The evidence's own words: merge and revert commit messages, reflog lines, held-out and acceptance notes.

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations

from collections.abc import Sequence

from mergebot.messages.words import _counted, _short

# -- the evidence's own words -----------------------------------------------------------------------------------


def merge_message(subtask_id: int, claim_version: int, title: str, sha: str, cand_id: int) -> str:
    return f"Land subtask {subtask_id} v{claim_version}: {title}\n\nCandidate: {sha}\nMergebot-Candidate: {cand_id}\n"


def revert_title(subtask_id: int, title: str) -> str:
    return f"Revert subtask {subtask_id}: {title}"[:200]


def revert_message(subtask_id: int, title: str, landed_id: int, merged_sha: str, red_sha: str,
                   failing: list[str]) -> str:
    tests = f" Failing: {', '.join(failing[:10])}." if failing else ""
    return (f"Revert subtask {subtask_id}: {title}\n\nMain's check failed at {red_sha}; bisection on the verifier "
            f"found landing {landed_id} ({merged_sha}) to be the first red commit.{tests}\n\n"
            f"Mergebot-Reverts-Landed: {landed_id}\nMergebot-Reverts: {merged_sha}\n")


def with_acceptance(message: str, paths: Sequence[str]) -> str:
    """A merge's message when the subtask's acceptance tests were written into it."""
    return message + "".join(f"Mergebot-Acceptance: {p}\n" for p in paths)


def judged_commit(merged: str, restored: Sequence[str], dropped: Sequence[str]) -> str:
    """The message of the commit a judging run checks out: the merge with main's tests."""
    return (f"The merge {merged[:12]} with main's tests\n\n"
            + "".join(f"Mergebot-Main-Test: {f}\n" for f in restored[:200])
            + "".join(f"Mergebot-Own-Test: {f}\n" for f in dropped[:200]))


def held_out_log_hidden(outcome: str) -> str:
    return (f"This run of the repository's held-out checks gave {outcome}. Its log is for reviewers and admins only: "
            "held-out checks are never shown to the agents they judge.")


def acceptance_probe(subtask_id: int, title: str) -> str:
    return f"Acceptance tests of subtask {subtask_id} on main: {title}\n\nMergebot-Acceptance-Probe: {subtask_id}\n"


def acceptance_tests_new(failing: int) -> str:
    return (f"the acceptance tests fail on main ({_counted(failing, 'test')} or files that do not pass there): they "
            "test what the subtask must change")


def acceptance_tests_nothing_new(main: str) -> str:
    return (f"the acceptance tests already pass on main (run on {_short(main)} with them written in): they test "
            "nothing new. Attach tests that fail until the subtask is done")


def acceptance_probe_unknown() -> str:
    return "the acceptance tests' run on main reported no test outcomes (not a pytest suite?): it cannot tell"


def landing_reflog(subtask_id: int, claim_version: int, cand_id: int) -> str:
    return f"mergebot: land subtask {subtask_id} v{claim_version} (candidate {cand_id})"


def batch_reflog(subtask_ids: Sequence[int]) -> str:
    return f"mergebot: land subtasks {', '.join(str(i) for i in subtask_ids)} (one verified run)"


def job_unfinished(job_id: int, status: str | None = None) -> str:
    return f"verify job {job_id} did not finish" + (f" ({status})" if status else "")


OWN_TESTS_DID_NOT_RUN = "the change's own tests did not run after main's tests passed (the verifier gave no result)"
LANDING_RUN_COVERS = "the run that landed this commit passed on it"
KNOWN_GREEN = "not run again: this check already passed on this commit"


def result_not_stored(why: str) -> str:
    """The log of a run whose result the database refused: the job ends as an error saying so."""
    return f"the run's result could not be stored: {why}"


# -- the squash commit (a repository's merge method ``squash``, issue 43) -------------------------------------------

BRANCH_TIP_TRAILER = "Mergebot-Branch-Tip"  # the agent's commit a squash commit lands (read back by the drills)


def squash_message(subtask_id: int, claim_version: int, title: str, description: str, tip: str, cand_id: int) -> str:
    """The one commit a landing becomes under ``squash``: the subtask's title and description, then trailers that
    name what landed (acceptance trailers follow them, ``with_acceptance``)."""
    body = description.strip()
    return (f"{title.strip() or f'Subtask {subtask_id}'}\n\n" + (f"{body}\n\n" if body else "")
            + f"Mergebot-Subtask: {subtask_id}\nMergebot-Claim-Version: {claim_version}\n"
            f"Mergebot-Candidate: {cand_id}\n{BRANCH_TIP_TRAILER}: {tip}\n")
