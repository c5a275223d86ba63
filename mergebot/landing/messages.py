"""Every sentence an agent or a reviewer reads from the landing path and the push checks (bors-ng keeps all of
its in ``message.ex``).

Rules:
  * The rest of ``mergebot.landing`` decides and builds typed results (a ``Refusal`` code, a ``Rejection``
    kind with its facts); only this module words them. A sentence says what happened and what to do next.
  * The first words of a rejection are stable (``conflicts with``, ``nothing to land``, ``the check``, ``the
    verifier could not run``): older rows are classified by them where no ``kind`` was recorded.
  * Pure: no I/O, nothing but strings from the facts given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verifier.runner import Result

SUBTASK_BRANCH = "refs/heads/subtasks/<id>/v<claim_version>"


def _short(sha: str | None) -> str:
    return (sha or "")[:12]


def _shown(items: Sequence[str], most: int) -> str:
    return ", ".join(items[:most]) + (" ..." if len(items) > most else "")


# -- push refusals (``mergebot.landing.checks``) ----------------------------------------------------------------


def pushed_to_target(ref: str, target_branch: str) -> str:
    return (f"{ref}: only Mergebot moves {target_branch}. Push your work to the branch your claim names "
            f"({SUBTASK_BRANCH}) and it will be verified and landed.")


def protected_ref(ref: str) -> str:
    return f"{ref}: agents may push only their subtask branches, {SUBTASK_BRANCH}; this ref is protected."


def unknown_subtask(ref: str, subtask_id: int) -> str:
    return f"{ref}: subtask {subtask_id} does not exist."


def delete_not_yours(ref: str, subtask_id: int) -> str:
    return f"{ref}: you may delete only branches of subtasks you own; subtask {subtask_id} is not yours."


def stale_version(ref: str, version: int, subtask_id: int, current: int) -> str:
    return (f"{ref}: claim version {version} is stale; subtask {subtask_id} is at claim version {current}. Your "
            "claim was superseded (a lease that ran out is handed to the next agent): stop work on it and claim "
            "again.")


def not_yours(ref: str, subtask_id: int, status: str, owned: bool) -> str:
    return (f"{ref}: subtask {subtask_id} is not yours (it is {status}{' and owned by another agent' if owned else ''})"
            ". Claim a subtask and push to the branch the claim names.")


def future_version(ref: str, version: int, subtask_id: int, current: int) -> str:
    return f"{ref}: claim version {version} does not exist; subtask {subtask_id} is at {current}."


def landing_now(ref: str, subtask_id: int) -> str:
    return (f"{ref}: your previous push of subtask {subtask_id} is landing right now; wait for its verdict "
            f"(`mergebot wait {subtask_id}`) before pushing again.")


def not_running(ref: str, subtask_id: int, status: str) -> str:
    return (f"{ref}: subtask {subtask_id} is {status}; only work under a claim can be pushed (`mergebot show "
            f"{subtask_id}` says what became of it).")


def push_too_large(ref: str, size: int, limit: int) -> str:
    return (f"{ref}: the push is {size} bytes, over this repository's limit of {limit}. Keep generated and binary "
            "files out of the change.")


def file_too_large(ref: str, path: str, size: int, limit: int) -> str:
    return f"{ref}: {path} is {size} bytes, over this repository's per-file limit of {limit}."


def too_many_commits(ref: str, most: int, target_branch: str) -> str:
    return f"{ref}: brings more than {most} commits not on {target_branch}; rebase your work onto {target_branch}."


def already_on_target(ref: str, target_branch: str) -> str:
    return f"{ref}: this commit is already on {target_branch}; there is nothing to land."


def unrelated_history(ref: str, root: str, target_branch: str) -> str:
    return (f"{ref}: commit {_short(root)} starts a history unrelated to {target_branch}. Base your work on "
            f"{target_branch} (git fetch; git rebase origin/{target_branch}).")


def foreign_commit(ref: str, sha: str, other: int, target_branch: str) -> str:
    return (f"{ref}: commit {_short(sha)} belongs to subtask {other}, which has not landed. Do not merge or base on "
            f"other agents' unlanded branches; rebase onto {target_branch}.")


def check_config(ref: str, paths: list[str], target_branch: str, *, allowed: bool) -> str:
    if allowed:  # only the verifier's own plugin's name is refused on an allowed subtask
        return (f"refused {ref}: {_shown(paths, 10)} would shadow the verifier's own pytest plugin "
                "(mergebot_outcomes): no change may add a module of that name.")
    return (f"refused {ref}: it changes what decides how the check runs ({_shown(paths, 10)}). The check runs as "
            f"{target_branch} configures it: take those changes out (`git restore --source origin/{target_branch} -- "
            "PATH`), or ask a lead to allow this subtask to change the check (`mergebot allow ID --check-changes`).")


def protected_paths(ref: str, paths: Sequence[str]) -> str:
    return (f"{ref}: changes protected paths ({_shown(paths, 5)}). These are configured by the repository's "
            "operator and cannot be changed by an agent's push.")


def duplicate_change(ref: str, other: int, owner: str, status: str, sha: str, landed_sha: str | None,
                     subtask_id: int) -> str:
    where = f"landed as {_short(landed_sha)}" if landed_sha else f"{status} as {_short(sha)}"
    return (f"{ref}: the same change (same patch id) as subtask {other}'s by {owner}, {where}. The work is done "
            f"once: if subtask {subtask_id} is that work, say so to the lead (`mergebot note {subtask_id} ...`) and "
            f"release it (`mergebot release {subtask_id}`); if it is other work, make the change it asks for.")


def outside_footprint(ref: str, paths: Sequence[str], footprint: Sequence[str]) -> str:
    return (f"{ref}: changes paths outside the subtask's footprint ({_shown(paths, 5)}; the footprint is "
            f"{_shown(footprint, 5)}), and this repository refuses that. Take those changes out, or widen the "
            "footprint first (`mergebot start --touch PATH` claims with your own estimate) if the work needs them.")


def outside_footprint_warning(subtask_id: int, paths: Sequence[str]) -> str:
    return (f"Mergebot: warning: subtask {subtask_id}'s change touches paths outside its footprint "
            f"({_shown(paths, 5)}): other agents may be working there; expect a conflict, or keep to the footprint.")


def forecast(f: Any, target_branch: str) -> list[str]:
    """The forecast (``mergebot.landing.forecast.Forecast``) as lines for the pusher; none when it is quiet."""
    lines = []
    if f.conflicts_with_main:
        lines.append(f"Mergebot: forecast: the change already conflicts with {target_branch} in "
                     f"{_shown(f.conflicts_with_main, 5)}: rebase now (`git fetch origin {target_branch} && git "
                     f"rebase origin/{target_branch}`), before the queue rejects it.")
    for c in f.candidates:
        also = (f"Mergebot: forecast: candidate {c['id']} of subtask {c['subtask_id']} ({c['owner']}, {c['status']}) "
                f"also changes {_shown(c['shared'], 5)}")
        if c.get("conflicts"):
            also += (f", and conflicts with this change: whichever lands second is rejected. Talk to {c['owner']} "
                     f"(`mergebot note {c['subtask_id']} ...`), or rebase onto it once it lands.")
        lines.append(also + ("" if c.get("conflicts") else "."))
    for r in f.running:
        lines.append(f"Mergebot: forecast: subtask {r['subtask_id']} ({r['owner']}, running) expects to touch "
                     f"{_shown(r['footprint'], 5)}.")
    return lines


def _twin(twin: dict[str, Any]) -> str:
    if "subtask_id" in twin:
        return f"subtask {twin['subtask_id']} {str(twin['title'])!r} ({twin['status']})"
    return f"{str(twin['title'])!r} (key {twin['key']} in the same tree)"


def twin_subtask(title: str, twin: dict[str, Any], alike: float) -> str:
    return (f"{title!r} nearly matches {_twin(twin)}, {alike:.0%} alike: the same work twice? If it is distinct "
            "work, create it with allow_duplicate (`mergebot create --allow-duplicate`); else leave it to that one.")


def twin_subtasks(pairs: Sequence[dict[str, Any]]) -> str:
    lines = [f"{len(pairs)} subtask(s) in the tree nearly match others; nothing was created:"]
    lines += [f"  key {p['key']} {str(p['title'])!r} ~ {_twin(p['twin'])}, {p['similarity']:.0%} alike"
              for p in pairs[:50]]
    if len(pairs) > 50:
        lines.append(f"  ... and {len(pairs) - 50} more")
    lines.append("Merge or reword the twins, or create the tree with allow_duplicate "
                 "(`mergebot create --file FILE --allow-duplicate`) if they are distinct work.")
    return "\n".join(lines)


def refused_push(lines: Sequence[str]) -> str:
    """The text git prints to the pusher (each line prefixed with 'remote:' by git)."""
    return "\n".join(["Mergebot refused this push:", *(f"  - {line}" for line in lines)])


def moved_on_before_queued(ref: str, subtask_id: int, status: str, sha: str) -> str:
    return (f"{ref}: git took {_short(sha)}, but subtask {subtask_id} was {status} before the push reached the queue "
            "(the bot restarted during it), so nothing of it lands. Claim again for more work on it.")


def queued(subtask_id: int, claim_version: int, sha: str, cand_id: int) -> str:
    return (f"Mergebot: queued subtask {subtask_id} v{claim_version} ({_short(sha)}) as candidate {cand_id}; "
            f"`mergebot wait {subtask_id}` follows it.")


UNKNOWN_PUSH = "Mergebot: unknown push; push over HTTP through `mergebot serve`."


def malformed_push(why: str) -> str:
    return f"Mergebot: malformed push: {why}"


def unlinked_sender(sender: str | None, forge: str) -> str:
    return (f"{sender!r} is not linked to a Mergebot agent, so nothing of this push lands. An admin links it with "
            f"`mergebot agent link NAME --{forge} {sender}`.")


# -- the queue's verdicts ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rejection:
    """Why the queue sent a candidate back to its owner.

    ``kind``: ``conflict`` (``paths`` conflict with the target branch), ``nothing_to_land`` (already on it),
    ``verifier_error`` (the verifier could not run the check, twice: no verdict on the change),
    ``check_failed`` or ``check_timeout`` (``run`` is the deciding run; ``retried`` says whether a retry on
    the same commit ruled flakiness out), ``disk_limit`` or ``memory_limit`` (the run reached that limit of the
    repository's sandbox and was ended; never retried)."""

    kind: str
    target_branch: str
    sha: str
    command: str = ""  # the repository's check
    merged_sha: str | None = None
    paths: tuple[str, ...] = ()
    run: Result | None = None
    retried: bool = True
    hunks: tuple[dict[str, object], ...] = ()  # a conflict's regions (``mergebot.git.repo.conflict_hunks``)


REASON_MAX = 2000  # a subtask's reason holds at most this much (the schema's bound): the whole log is elsewhere


def rejection(r: Rejection) -> str:
    """The sentence a rejected candidate's owner reads, at most ``REASON_MAX`` characters."""
    text = _rejection(r)
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 1] + "…"


def _rejection(r: Rejection) -> str:
    if r.kind == "conflict":
        return (f"conflicts with {r.target_branch} in: {_shown(r.paths, 10)}. Fetch {r.target_branch}, merge or "
                "rebase onto it, resolve, and push again.")
    if r.kind == "nothing_to_land":
        return f"nothing to land: {_short(r.sha)} is already on {r.target_branch}."
    assert r.run is not None
    if r.kind == "flaky_then_failed":
        return (f"the check failed once and passed on a retry (flaky), and now gave {r.run.outcome} (exit "
                f"{r.run.exit_code}) on the merged commit {_short(r.merged_sha)} with the newer {r.target_branch}"
                f"{_ran(r)}:\n{r.run.excerpt()}")
    if r.kind == "verifier_error":
        return (f"the verifier could not run the check on {_short(r.merged_sha)} (twice): {r.run.excerpt(5)}\n"
                "This is not a verdict on your change; push again, or ask an operator to look at the verifier.")
    if r.kind == "tests_weakened":
        comparison = ((r.run.tests or {}).get("comparison") or {})
        changes = comparison.get("weakened") or []
        count = int(comparison.get("weakened_count") or len(changes))
        shown = "; ".join(f"{c['id']} ({c['was']} on {r.target_branch}, {c['now']} now)" for c in changes[:8])
        more = f"; and {count - 8} more" if count > 8 else ""
        tests = f"{count} test{'s' if count != 1 else ''}"
        return (f"{tests} that pass on {r.target_branch} do not pass on the merged commit {_short(r.merged_sha)}, "
                f"though the check exited 0{_ran(r)}: {shown}{more}. "
                "A change may not weaken the tests that judge it: make them pass as they are (a lead can allow "
                "a subtask to remove tests).")
    if r.kind == "acceptance_failed":
        failed = (((r.run.tests or {}).get("comparison") or {}).get("acceptance") or {}).get("failed") or []
        shown = "; ".join(f"{c['id']} ({c['now']})" for c in failed[:8])
        return (f"the subtask's acceptance tests did not all pass on the merged commit {_short(r.merged_sha)}, "
                f"though the check exited 0{_ran(r)}: {shown}. They are the subtask's contract: they "
                "run as attached, whatever the branch has at their paths.")
    if r.kind == "tests_changed":
        comparison = ((r.run.tests or {}).get("comparison") or {})
        changed = list(comparison.get("changed") or [])
        if comparison.get("old_tests"):
            failing = comparison["old_tests"].get("failing") or []
            return (f"the check passed on the merged commit {_short(r.merged_sha)}{_ran(r)}, "
                    f"but the change edits existing tests ({', '.join(changed[:8])}), and main's version of them "
                    f"fails against the change's code ({', '.join(failing[:8]) or 'the run failed'}): the edit "
                    "changed what the tests check, not only how.")
        return (f"the check passed on the merged commit {_short(r.merged_sha)}{_ran(r)}, but the change edits "
                f"{len(changed)} existing test{'s' if len(changed) != 1 else ''} "
                f"({', '.join(changed[:8])}{', ...' if len(changed) > 8 else ''}), which this repository refuses: "
                "a test that changes with the code no longer checks it.")
    if r.kind == "held_out_failed":
        held = ((r.run.tests or {}).get("held_out") or {})
        failing = list(held.get("failing") or [])
        count = int(held.get("failing_count") or len(failing))
        return (f"the repository's held-out checks failed on the merged commit {_short(r.merged_sha)}, though the "
                f"check passed{_ran(r)}: {count} failed ({', '.join(failing[:8]) or 'see below'}"
                f"{', ...' if count > 8 else ''}). Held-out checks are not shown; make the change do what the "
                "subtask asks.")
    if r.kind == "no_report":
        problem = ((r.run.tests or {}).get("problem") or "no outcomes")
        return (f"the tests reported nothing on the merged commit {_short(r.merged_sha)} ({problem}), though the "
                f"check exited 0{_ran(r)}, where {r.target_branch}'s report every test. A run whose "
                f"report was stopped proves nothing:\n{r.run.excerpt(8)}")
    if r.kind in ("disk_limit", "memory_limit"):
        limits = r.run.limits or {}
        what = (f"its disk limit ({limits.get('disk_limit_mb', '?')} MiB written in all: the checkout's changes, /tmp "
                "and /dev/shm)" if r.kind == "disk_limit" else
                f"its memory limit ({limits.get('memory_mb', '?')} MiB resident: the kernel killed a process of it)")
        return (f"the check reached {what} on the merged commit {_short(r.merged_sha)} and was ended{_ran(r)}. "
                f"A limit is the change's failure, never retried:\n{r.run.excerpt()}")
    once = "" if r.retried else (" (judged on this one run: this server does not retry failed checks, "
                                 "MERGEBOT_RETRY_FAILED_CHECKS=0)")
    return (f"the check gave {r.run.outcome} (exit {r.run.exit_code}) on the merged commit {_short(r.merged_sha)}"
            f"{once}{_ran(r)}:\n{r.run.excerpt()}")


def _ran(r: Rejection) -> str:
    """The command, after what it gave: a forge's 140-character status keeps the verdict, not a long path."""
    assert r.run is not None
    return f" (the check: `{r.command or r.run.command}`)"


def parked(target_branch: str, main: str) -> str:
    return (f"{target_branch} is red: the check fails on {_short(main)} too, so this failure is pre-existing, not the "
            "candidate's. Parked until main is green again.")


def flaky_requeued(target_branch: str) -> str:
    return (f"failed once and passed on a retry of the same commit; verified again on the current {target_branch}")


def base_fails(target_branch: str, main: str) -> str:
    return f"the check fails on {target_branch} itself ({_short(main)})"


def post_land_failed(outcome: str) -> str:
    return f"the post-land check gave {outcome}"


def red_main(target_branch: str, sha: str, why: str) -> str:
    return f"{target_branch} is red at {_short(sha)}: {why}. Landing is paused: only a fix lands."


def red_main_announcement(repo: str, reason: str) -> str:
    return f"[{repo}] {reason} An admin can resume with `mergebot repo resume {repo}`."


def flaky_on_main(repo: str, target_branch: str, sha: str, outcome: str) -> str:
    return (f"[{repo}] the post-land check on {target_branch} at {_short(sha)} gave {outcome}, then passed when run "
            "again: recorded as flaky on main; nothing reverted, landing goes on.")


def revert_title(subtask_id: int, title: str) -> str:
    return f"Revert subtask {subtask_id}: {title}"[:200]


def revert_message(subtask_id: int, title: str, landed_id: int, merged_sha: str, red_sha: str,
                   failing: list[str]) -> str:
    tests = f" Failing: {', '.join(failing[:10])}." if failing else ""
    return (f"Revert subtask {subtask_id}: {title}\n\nMain's check failed at {red_sha}; bisection on the verifier "
            f"found landing {landed_id} ({merged_sha}) to be the first red commit.{tests}\n\n"
            f"Mergebot-Reverts-Landed: {landed_id}\nMergebot-Reverts: {merged_sha}\n")


def reverted_evidence(subtask_id: int, version: int, target_branch: str, merged_sha: str, red_sha: str,
                      failing: list[str], probes: list[tuple[str, str]], candidate_sha: str) -> str:
    """What a reverted subtask's owner is told (its status reason), with the next command."""
    tests = f" Failing tests: {', '.join(failing[:10])}." if failing else ""
    runs = "; ".join(f"{_short(sha)} {outcome}" for sha, outcome in probes) or "none needed"
    nxt = version + 1
    return (f"Your landing {_short(merged_sha)} turned {target_branch} red (its check failed at {_short(red_sha)}) "
            f"and was reverted.{tests} Bisection runs: {runs}. The subtask is yours again at claim version {nxt}: "
            f"`git fetch origin {target_branch} && git checkout -B subtasks/{subtask_id}/v{nxt} origin/{target_branch}"
            f" && git cherry-pick {candidate_sha}`, fix it so the check passes with what landed since, and push "
            f"subtasks/{subtask_id}/v{nxt}.")


def mend_found(repo: str, target_branch: str, red_sha: str, subtask_id: int, owner: str | None,
               merged_sha: str) -> str:
    return (f"[{repo}] {target_branch} is red at {_short(red_sha)}; bisection found subtask {subtask_id}'s landing "
            f"{_short(merged_sha)} (by {owner or 'unknown'}) to be the culprit. Its revert is queued first; the rest "
            "of the queue waits only until it lands.")


def dependency_reverted(subtask_id: int) -> str:
    return (f"waits: subtask {subtask_id}, which this subtask depends on, is not landed any more (its landing was "
            f"reverted because it broke main). Candidates of this subtask are not verified until subtask {subtask_id} "
            "lands again; keep working, and push as usual.")


def mend_gave_up(repo: str, target_branch: str, why: str) -> str:
    return (f"[{repo}] {target_branch} stays red and parked: the bot could not mend it ({why}). Land a fix, or "
            f"`mergebot repo resume {repo}`.")


MEND_NO_SUSPECTS = "no landing since the last green check to blame"
MEND_REVERT_RED = "the red commits include a revert the bot made already; it does not revert twice"
MEND_CONFLICT = "the culprit's revert no longer applies cleanly on main"
MEND_RESUMED = "main's check failed before a restart; its result is on the landed row's post-land run"


def mend_inconclusive(sha: str, outcome: str) -> str:
    return f"a bisection run on {_short(sha)} could not judge it ({outcome})"


def green_again(repo: str, target_branch: str, sha: str) -> str:
    return f"[{repo}] {target_branch} is green again at {_short(sha)}; landing resumed."


def forge_refused(repo: str, why: str, target_branch: str) -> str:
    return (f"[{repo}] landing paused: {why}. Let the bot push to {target_branch}, then "
            f"`mergebot repo resume {repo}`.")


def resumed_by(repo: str, who: str) -> str:
    return f"[{repo}] landing resumed by {who}."


# Why a candidate was put back in the queue, or waits there.
RECONCILING = "reconciling; verifying again"
AHEAD_FAILED = "a candidate ahead of it failed; re-planned"
AHEAD_FAILED_OR_WITHDRAWN = "a candidate ahead of it failed or was withdrawn; re-planned"
AHEAD_DID_NOT_LAND = "the candidate ahead of it did not land; re-planned"
REPLANNED_AFTER_ERROR = "re-planned after an error"
REPLANNED_AFTER_FAILURE = ("left out of a failed batch as its likeliest culprit, but the rest of the batch failed "
                           "too: the culprit may be elsewhere, so it is verified again")
WAITS_FOR_AHEAD = "waits for the candidates ahead of it"
WAITS_FOR_SAME_PATHS = "waits for the verdict on a failed candidate that touches the same paths"
BATCH_WITHDRAWN = "a candidate landing with it was withdrawn; verified again without it"
STOPPED_BEFORE_MAIN_MOVED = "the bot stopped before main moved; verifying again"


def red_alone(target_branch: str) -> str:
    return f"{target_branch} is red; verifying against it alone"


def moved_under_speculation(target_branch: str) -> str:
    return f"{target_branch} moved under the speculation; verifying again"


def moved_during_landing(target_branch: str) -> str:
    return f"{target_branch} moved during landing; retrying"


def newer_push(sha: str) -> str:
    return f"superseded by a newer push ({_short(sha)})"


def unannounced_push(subtask_id: int, tip: str, ref: str) -> str:
    return (f"a newer push of subtask {subtask_id} ({_short(tip)}) reached {ref} without being announced to the queue "
            "(the bot restarted during it); it is queued instead")


# Why a candidate no longer is what its subtask waits on (its fence).
FENCE_GONE = "the subtask no longer exists"
FENCE_REPLACED = "a newer push replaced this candidate"


def fence_reclaimed(claim_version: int) -> str:
    return f"the subtask was reclaimed (claim version {claim_version})"


def fence_status(status: str) -> str:
    return f"the subtask is {status}"


# -- the evidence's own words -----------------------------------------------------------------------------------


def merge_message(subtask_id: int, claim_version: int, title: str, sha: str, cand_id: int) -> str:
    return f"Land subtask {subtask_id} v{claim_version}: {title}\n\nCandidate: {sha}\nMergebot-Candidate: {cand_id}\n"


def with_acceptance(message: str, paths: Sequence[str]) -> str:
    """A merge's message when the subtask's acceptance tests were written into it."""
    return message + "".join(f"Mergebot-Acceptance: {p}\n" for p in paths)


def old_tests_commit(files: Sequence[str]) -> str:
    return "Main's version of the edited tests\n\n" + "".join(f"Mergebot-Old-Test: {f}\n" for f in files)


def held_out_log_hidden(outcome: str) -> str:
    return (f"This run of the repository's held-out checks gave {outcome}. Its log is for reviewers and admins only: "
            "held-out checks are never shown to the agents they judge.")


def acceptance_probe(subtask_id: int, title: str) -> str:
    return f"Acceptance tests of subtask {subtask_id} on main: {title}\n\nMergebot-Acceptance-Probe: {subtask_id}\n"


def acceptance_tests_new(failing: int) -> str:
    return (f"the acceptance tests fail on main ({failing} test{'s' if failing != 1 else ''} or files that do not "
            "pass there): they test what the subtask must change")


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


LANDING_RUN_COVERS = "the run that landed this commit passed on it"
KNOWN_GREEN = "not run again: this check already passed on this commit"


# -- commands in a pull request's comments (mergebot.forge.commands) ------------------------------------------


def command_unknown(name: str, names: tuple[str, ...]) -> str:
    return f"`@mergebot {name[:40]}` is no command of mine; the commands are " + ", ".join(
        f"`@mergebot {n}`" for n in names) + "."


def command_unlinked(sender: str | None, forge: str) -> str:
    return (f"{sender!r} is not linked to a Mergebot agent, so its commands change nothing (only `@mergebot why` "
            f"is for everyone). An admin links it with `mergebot agent link NAME --{forge} {sender}`.")


def command_needs_manager(name: str) -> str:
    return (f"`@mergebot {name}` is for leads and admins only: an owner must not move its own work up the queue. "
            "Nothing changed.")


def command_priority_number(low: int, high: int) -> str:
    return f"`@mergebot priority N` takes a whole number from {low} to {high}. Nothing changed."


def command_not_owner(name: str) -> str:
    return (f"`@mergebot {name}` is for the pull request's owner (the agent whose claim it is), or a lead or admin. "
            "Nothing changed.")


def command_done(login: str | None, name: str, what: str) -> str:
    return f"@{login} `@mergebot {name}`: {what}"


def command_refused(login: str | None, name: str, why: str) -> str:
    return f"@{login} `@mergebot {name[:40]}` refused: {why}"
