"""What each verdict kind means and what to do next, as an agent reads it on every door (API, CLI, MCP tools,
pages, commit statuses). ``mergebot.landing.judge.verdicts`` holds the logic (which kinds are final, which one a
candidate or a refusal is); the words are here.

Part of ``mergebot.messages``: its rules hold here. Besides:
  * ``KINDS`` names every kind there is; ``docs/agents.md`` explains each one (a test checks it).
  * ``meaning`` may name ``{target}``, ``next`` also ``{sid}``; ``mergebot.landing.judge.verdicts`` fills them in.
  * ``next`` is one command, or the few steps that lead to one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Words:
    meaning: str
    next: str  # with {sid} and {target} filled in


KINDS: dict[str, Words] = {
    # the queue's verdicts on a candidate
    "queued": Words("waits in the merge queue", "`mergebot wait {sid}` (or `mergebot submit` waits for it)"),
    "verifying": Words("its check runs on the merged commit", "`mergebot wait {sid}`"),
    "landing": Words("it passed; main is moving to it", "`mergebot wait {sid}`"),
    "landed": Words("it is on {target}", "`mergebot start --repo REPO --dir DIR` for the next subtask"),
    "pre_existing": Words("the check fails on {target} too: not the change's fault; parked until {target} is "
                          "green, then it is verified again by itself", "nothing: `mergebot wait {sid}`"),
    "conflict": Words("it conflicts with {target} in the paths given (hunks shows where)",
                      "`git fetch origin {target} && git rebase origin/{target}`, resolve each conflict, `git add` "
                      "it, `git rebase --continue` until the rebase ends, then `mergebot submit`"),
    "nothing_to_land": Words("the commit is already on {target}",
                             "commit the subtask's work and `mergebot submit` (or, if it is done, tell the lead with "
                             "`mergebot note`)"),
    "check_failed": Words("the check failed on the merged commit, and again on a retry (failing_tests names "
                          "the tests; log_tail is the end of the log)",
                          "fix it, commit, `mergebot submit`"),
    "check_timeout": Words("the check ran past its time limit on the merged commit",
                           "make it finish in time (a hang, a slow test), commit, `mergebot submit`"),
    "disk_limit": Words("the check wrote more than the repository's disk limit on the merged commit (its "
                        "checkout's changes, /tmp and /dev/shm together) and was ended; never retried",
                        "write less (a test that leaves large files, a build into the checkout, a runaway log), "
                        "commit, `mergebot submit`"),
    "memory_limit": Words("the check used more resident memory than the repository's limit on the merged "
                          "commit: the kernel killed a process of it, and the run was ended; never retried",
                          "use less memory (a leak, a test that loads too much at once), commit, `mergebot submit`"),
    "tests_weakened": Words("the check exited 0 on the merged commit, but tests that pass on {target} do not "
                            "pass now (failed, skipped, xfailed, deselected, missing or deleted: tests.weakened names "
                            "each and what it became)",
                            "make those tests pass again without changing, skipping or deselecting them (`git diff "
                            "origin/{target} -- '*test*'` shows what you changed; a skipped test is not a removed "
                            "one), commit, `mergebot submit`; only if a test must go: delete it and ask a lead, "
                            "`mergebot allow {sid} --test-removal`"),
    "no_report": Words("the check exited 0 on the merged commit, but reported no test outcome at all, where "
                       "{target}'s tests do: something stopped pytest from reporting (an exit before the tests ran, "
                       "a disabled plugin, a report that was not written)",
                       "let the suite run and report as it does on {target} (do not exit early, disable plugins or "
                       "move the report), commit, `mergebot submit`"),
    "report_flood": Words("the check reported more test outcomes than the verifier keeps (more lines, tests "
                          "or bytes than its bounds, or a test id that is too long: tests.problem says which): nothing "
                          "of what it reported was kept, so nothing of it can pass", "let the suite report as it does "
                          "on {target} (no code of the change writes to the test report, prints outcomes or makes up "
                          "test ids), commit, `mergebot submit`"),
    "acceptance_failed": Words("the check exited 0 on the merged commit, but the subtask's acceptance tests "
                               "did not all pass (tests.comparison.acceptance names each; a file none of whose tests "
                               "ran counts too)", "make the acceptance tests pass as they are (`mergebot show {sid}` "
                               "names them, GET /api/v1/subtasks/{sid}/acceptance gives them; they are written into "
                               "every merge, whatever your branch has at their paths), commit, `mergebot submit`"),
    "tests_changed": Words("the change edits existing tests (tests.comparison.changed names them), and the "
                           "repository refuses that unless a lead marked the subtask as changing behaviour",
                           "keep the existing tests as they are and add new ones (`git diff origin/{target} -- "
                           "'*test*'`), commit, `mergebot submit`; if the behaviour they test must change, ask a "
                           "lead: `mergebot allow {sid} --behaviour-change`"),
    "held_out_failed": Words("the check passed on the merged commit, but the repository's held-out checks "
                             "failed (failing_tests names them; held-out checks are never shown: only whether they "
                             "pass, and which failed)", "make the change do what the subtask asks, not only what its "
                             "visible tests check (a hard-coded answer fails them), commit, `mergebot submit`"),
    "flaky_then_failed": Words("it failed once and passed on a retry (flaky), then failed again when it was "
                               "verified on the newer {target}", "fix it, commit, `mergebot submit`; if the test is "
                               "flaky, `mergebot submit --again`"),
    "verifier_error": Words("the verifier could not run the check (twice): no verdict on the change",
                            "`mergebot submit --again`"),
    "superseded": Words("replaced: a newer push of the subtask, or its claim moved on",
                        "`mergebot submit` follows your newest push; if the claim moved on, claim other work"),
    "cancelled": Words("the queue dropped it (its subtask was cancelled, or its landing could not be "
                       "recorded)", "`mergebot show {sid}`, then claim other work"),
    # the push checks' refusals (git refused the push; nothing was queued)
    "protected_ref": Words("only subtask branches may be pushed; {target} and other refs are the bot's",
                           "`mergebot submit` (it pushes to your claim's branch)"),
    "unknown_subtask": Words("the branch names a subtask that does not exist", "`mergebot claim` for work"),
    "not_owner": Words("the subtask is not yours", "`mergebot start --repo REPO --dir DIR` for your own work"),
    "stale_claim": Words("the branch's claim version is older than the subtask's current one (the claim was "
                         "superseded)",
                         "`mergebot start --repo REPO --dir DIR --carry` to claim again with your commits"),
    "not_claimed": Words("the branch's claim version does not exist: nobody has claimed the subtask at that "
                         "version (or ever)", "claim first, `mergebot start --repo REPO --dir DIR` (it claims the "
                         "next ready subtask, in a worktree on the branch its claim names), then `mergebot submit` "
                         "there"),
    "landing_now": Words("the previous push of the subtask is being landed right now", "`mergebot wait {sid}`"),
    "not_running": Words("the subtask is not being worked on (landed, ready, failed or cancelled)",
                         "`mergebot show {sid}`, then claim other work"),
    "too_large": Words("the push, or a file in it, is over the repository's size limits",
                       "keep generated and binary files out of the change, amend, `mergebot submit`"),
    "history_anomaly": Words("the pushed history is not a change on {target} (an unrelated root, too many "
                             "commits, or other agents' unlanded commits)",
                             "`git fetch origin {target} && git rebase origin/{target}`, `mergebot submit`"),
    "check_config": Words("the change touches what decides how the check runs (paths lists them: conftest.py, "
                          "pytest.ini, the check's own script...): the check runs as {target} configures it",
                          "take those changes out (`git restore --source origin/{target} -- PATH`), commit, `mergebot "
                          "submit`; if the subtask must change the check, ask a lead: `mergebot allow {sid} "
                          "--check-changes`"),
    "protected_path": Words("the change touches paths the operator protects (paths lists them)",
                            "take those changes out (`git restore --source origin/{target} -- PATH`), commit, "
                            "`mergebot submit`"),
    "outside_footprint": Words("the change touches paths outside its subtask's footprint (paths lists them), "
                               "and the repository refuses that", "take those changes out, commit, `mergebot "
                               "submit`; or claim with a wider footprint (`mergebot start --touch PATH`)"),
    "suspicious": Words("the change's non-test code reaches into the machinery that checks it (suspicious names "
                        "each line and why: the outcome pipe, pytest's variables, the held-out checks, sys.modules or "
                        "builtins written, an exit at import, an always-true __eq__...), and the repository refuses "
                        "that",
                        "take those lines out (code that behaves the same whether or not it is tested), commit, "
                        "`mergebot submit`; if the subtask must touch the test machinery, ask a lead: `mergebot allow "
                        "{sid} --check-changes`"),
    "duplicate": Words("the same change (patch id) as another subtask's, landed or in the queue (twin names "
                       "it): the work is done once", "if subtask {sid} is that work, `mergebot note {sid} ...` for the "
                       "lead and `mergebot release {sid}`; else make the change it asks for and `mergebot submit`"),
    "claim_superseded": Words("git took the push, but the claim had changed before it reached the queue",
                              "`mergebot show {sid}`; `mergebot start --repo REPO --dir DIR --carry` to claim again"),
    # what the agent's side says without a verdict from the bot
    "unchanged": Words("nothing was pushed: the branch already held the commit, so nothing was queued",
                       "commit a change and `mergebot submit`, or `mergebot submit --again`"),
    "push_failed": Words("git could not push (the server refused the connection or the credentials)",
                         "read git's message; check `mergebot status` and the token"),
    # the approval gate (issue 43): not final, nothing for the agent to change
    "awaiting_approval": Words("its checks passed, and the repository requires a lead's or reviewer's approval of "
                               "this exact commit before it lands (the message names the command that approves it)",
                               "nothing: ask a lead or reviewer to approve it (`mergebot approve {cand}`), then "
                               "`mergebot wait {sid}`; pushing again makes a new candidate that needs a new approval"),
}


def claim_gone(subtask_id: int | str, status: str, claim_version: int) -> str:
    """``next`` for a final verdict whose claim no longer holds: there is no branch to push to."""
    return (f"the claim no longer holds (subtask {subtask_id} is {status} at claim version {claim_version}): "
            + ("claim other work, `mergebot claim`" if status != "ready" else
               "`mergebot start --repo REPO --dir DIR --carry` to claim it again with your commits"))
