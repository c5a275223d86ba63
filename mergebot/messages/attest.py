"""Reviewers and operators: what ``mergebot attest verify`` and the provenance of a landing say (issue 44)."""

from __future__ import annotations

from collections.abc import Sequence

from mergebot.messages.words import _short

ATTEST_UNSIGNED = "the envelope carries no signature"
ATTEST_BAD_SIGNATURE = ("the signature does not match the payload and its type: the statement was changed after it "
                        "was signed")
ATTEST_KEY_NOT_ED25519 = "the signing key file holds no Ed25519 private key"
ATTEST_NO_STATEMENT = ("no landing statement: main moved here without the bot (an admin's push, a push to the "
                       "forge's main around the bot), or its note was removed")
ATTEST_NO_START = ("cannot tell where the bot's history starts without a statement at main's head: give --since SHA "
                   "(the commit main stood at when the bot took the repository)")


# What could not be read, said with why (``attest_unreadable``).
UNREADABLE = {
    "envelope": "not a DSSE envelope",
    "payload": "the payload is no JSON object",
    "time": "no time with its offset (ISO 8601)",
    "trust": "the trust file cannot be read",
    "trust_key": "a trust file's key is keyid, public (Ed25519, hex), validFrom and validUntil",
}


def attest_unreadable(what: str, why: object) -> str:
    return f"{UNREADABLE[what]}: {str(why)[:200]}"


def attest_wrong_payload_type(got: object, want: str) -> str:
    return f"payloadType is {got!r}, not {want!r}"


def attest_unknown_key(keyids: Sequence[str]) -> str:
    named = ", ".join(k[:16] for k in keyids) or "none"
    return f"signed by a key the trust file does not list ({named})"


def attest_trust_version(version: int) -> str:
    return (f"the trust file's version {version} does not follow the one before it (versions count from 1, each "
            "names the digest of its predecessor and lists at least one key)")


def attest_trust_signature(version: int, why: str) -> str:
    return (f"the trust file's version {version} is not signed by a key it replaces (the first: a key it lists): "
            f"{why}")


def attest_trust_not_extended(version: int) -> str:
    return (f"this trust file does not extend the one accepted before (version {version} of another root): a "
            "change of the trust file must be signed by a key it replaces")


def attest_key_not_valid_then(keyid: str, at: str) -> str:
    return f"signed by key {keyid[:16]}, which the trust file does not hold valid at {at}"


def attest_subject_mismatch(sha: str, subjects: Sequence[object]) -> str:
    named = ", ".join(_short(str(s)) for s in subjects) or "none"
    return f"the statement is about {named}, not {_short(sha)}: a statement of another commit"


def attest_other_repository(got: object, want: str) -> str:
    return f"the statement is about repository {got!r}, not {want!r}"


def attest_several_statements(n: int) -> str:
    return f"{n} landing statements for one commit: a commit lands once"


def attest_not_its_parent(before: object, parent: str | None) -> str:
    return (f"the statement says main was {_short(str(before))} before, but the commit's parent is "
            f"{_short(parent or 'none')}")


def attest_sequence_backwards(sequence: object, later: int | None) -> str:
    return (f"landing number {sequence} is not before the next one's ({later}): an older statement replayed, or "
            "main went backwards")


def attest_since_not_found(since: str) -> str:
    return f"the start {_short(since)} is not on main's first-parent history: main was rewritten"


def attest_accepted_gone(commit: str) -> str:
    return (f"{_short(commit)}, accepted before, is no longer on main's first-parent history: main went backwards "
            "or was rewritten")


# -- what ``mergebot attest verify`` prints ----------------------------------------------------------------------


def attest_finding(sha: str, why: str) -> str:
    return f"{_short(sha)}: {why}"


def attest_verified(checked: int, since: str | None, keys: Sequence[str]) -> str:
    signed = ", ".join(k[:16] for k in keys) or "no key"
    return (f"main's {checked} commit(s) since {_short(since or 'its start')} each have one landing statement, "
            f"signed by a trusted key ({signed}); main never went backwards")


def attest_failed(findings: int, checked: int) -> str:
    return (f"{findings} finding(s) in {checked} commit(s) of main: these moves of main are not proven by the bot's "
            "statements")


ATTEST_NEEDS_TRUST = ("give the trust file the repository's operators publish: --trust FILE (on the server it is "
                      "DATA_DIR/attest/trust.json)")
ATTEST_NEEDS_REPO = "give the repository: --repo NAME (or --git-dir DIR for a clone)"


def attest_no_ref(ref: str) -> str:
    return (f"{ref} is not in this repository: give --ref (a clone's main is often refs/remotes/origin/main), and "
            "fetch the notes: git fetch origin refs/notes/mergebot:refs/notes/mergebot")


ATTEST_NO_KEY_TO_ROTATE = "this data directory has no signing key yet: `mergebot init` makes one"


def attest_rotated(version: int) -> str:
    return (f"the trust file is at version {version}, signed by the key it replaces: publish it again where "
            "verifiers read it")


# -- a landed record's provenance (its page and ``GET /api/v1/landed/{id}/attestations``) -------------------------

ATTEST_NO_TRUST_FILE = ("this server has no trust file (DATA_DIR/attest/trust.json): its statements cannot be "
                        "checked here")


def attest_server_trust_bad(why: str) -> str:
    return f"the server's trust file does not hold: {why}"


# -- the reconciler's audit of main (operators: a paused repository's reason, /healthz, the queue page) --------


def audit_went_back(before: str, now: str) -> str:
    return (f"main went from {_short(before)} to {_short(now)}, which is not after it: moved back or rewritten "
            "without the bot")


def unattested_summary(commits: Sequence[str], count: int) -> str:
    named = ", ".join(_short(c) for c in commits[:5])
    more = f" and {count - 5} more" if count > 5 else ""
    return (f"{count} commit(s) on main that no landing statement explains ({named}{more}): main moved without the "
            "bot (an admin's push, a push to the forge's main around it)")


def unattested_paused(commits: Sequence[str], count: int) -> str:
    """A repository paused by its --on-unattested pause rule: the reason its queue page and /healthz show."""
    return (unattested_summary(commits, count) + "; landing is paused until an admin looks and resumes it "
            "(mergebot repo resume NAME, or the queue page's Resume)")


def unattested_seen_hint(name: str) -> str:
    return (f"once a person has looked, `mergebot repo resume {name}` (or the queue page's Resume) clears the "
            "finding; a later move around the bot is found anew")


# -- ``mergebot reverify LANDED``: the landed record's check run again -----------------------------------------

REVERIFY_OUTCOMES = {
    "reproduced": "reproduced: the same tests had the same outcomes, and the check the same overall result",
    "flaky_only": "flaky only: the tests that differ are all known to flake (each failed in a run whose retry on the "
                  "same commit passed)",
    "diverged": "diverged: the check does not give the landed record's result again",
    "error": "error: the run could not vouch for anything (its workers lost it, or it could not start); ask again",
}


def may_not_reverify(name: str, role: str) -> str:
    return (f"{name} (role {role}) may not re-verify a landing: that is a reviewer's, a lead's or an admin's "
            "(`mergebot reverify`). Nothing was started.")


def reverify_no_record(landed_id: int) -> str:
    return (f"landed record {landed_id} has neither a verifier run nor a landing statement to compare a new run "
            "with (it landed without the queue)")


def reverify_started(landed_id: int, job_id: int, sha: str) -> str:
    return (f"landed record {landed_id}: its check runs again on `{_short(sha)}` as verify job {job_id}; "
            f"`mergebot reverify {landed_id} --wait` waits for the result")


def reverify_still_running(landed_id: int, job_id: int) -> str:
    return (f"landed record {landed_id}: verify job {job_id} is still running; ask again later "
            f"(`mergebot reverify {landed_id} --wait`)")


def reverify_result(landed_id: int, outcome: str, differing: Sequence[str], count: int) -> str:
    said = REVERIFY_OUTCOMES.get(outcome, outcome)
    named = "".join(f"\n  {t}" for t in differing)
    more = f"\n  ... and {count - len(differing)} more" if count > len(differing) else ""
    return f"landed record {landed_id}: {said}" + (f"; {count} test(s) differ:{named}{more}" if count else "")


REVERIFY_FORM_REFUSED = ("This form did not come from this site's pages (its origin or its CSRF token is wrong). "
                         "Reload the page and try again.")
REVERIFY_HELD_OUT_DIFFERS = "(held-out checks)"
