"""The one living comment on a pull request: what it says about the pull request's newest candidate. Pure.

The bot posts one comment per pull request and edits it as the newest candidate moves: queued (its place in the
queue and what is ahead), verifying, landed (the merged commit, a link to the landed record), or rejected (the
typed verdict, worded by ``mergebot.messages``, with the exact next command). Earlier candidates of the same pull
request collapse into one line each. It carries a hidden marker with the repository and the pull request's
number (``marker``), so a bot that lost the comment's id (a crash between posting it and recording it) finds it
again instead of posting a second one.
"""

from __future__ import annotations

from dataclasses import dataclass

from mergebot.forge import checkrun
from mergebot.models import Verdict

MAX_EARLIER = 20
MAX_CHARS = 60_000  # GitHub takes 65,536 characters in a comment; Gitea more


def marker(forge_repo: str, number: int) -> str:
    return f"<!-- mergebot:{forge_repo.lower()}#{number} -->"


@dataclass(frozen=True)
class Earlier:
    """An earlier candidate of the pull request, for its one line."""

    candidate_id: int
    sha: str
    status: str
    kind: str


def body(*, forge_repo: str, number: int, status: str, verdict: Verdict, target: str,
         position: int | None = None, ahead: tuple[int, ...] = (), landed_url: str | None = None,
         details_url: str | None = None, earlier: tuple[Earlier, ...] = (), answer: str | None = None,
         full: bool = False) -> str:
    """The comment's text for the newest candidate (``status`` its status, ``verdict`` its verdict); ``answer``:
    to the last command given on the pull request; ``full`` (asked with ``@mergebot why``): the whole verdict,
    its log's tail and test comparison included."""
    cand = f"candidate {verdict.candidate_id}"
    if details_url:
        cand = f"[{cand}]({details_url})"
    head = f"`{(verdict.sha or '')[:12]}`"
    lines = [marker(forge_repo, number), f"**Mergebot** · {cand} · {head}", ""]
    lines += _state(status, verdict, target, position, ahead, landed_url)
    if full:
        lines += ["", "<details open><summary>The whole verdict</summary>", ""]
        lines += [f"- kind: `{verdict.kind}` (final: {'yes' if verdict.final else 'no'})", f"- next: {verdict.next}"]
        if verdict.tests:
            lines += ["", checkrun.comparison(verdict.tests)]
        if verdict.log_tail:
            lines += ["", "Log (its tail):", "", "```", verdict.log_tail[-6000:], "```"]
        lines += ["", "</details>"]
    if answer:
        lines += ["", f"> {answer}"]
    if earlier:
        lines += ["", "<details><summary>Earlier candidates of this pull request</summary>", ""]
        for e in earlier[-MAX_EARLIER:]:
            lines.append(f"- candidate {e.candidate_id} `{e.sha[:12]}`: {e.status}"
                         + (f" (`{e.kind}`)" if e.status == "rejected" else ""))
        lines += ["", "</details>"]
    text = "\n".join(lines)
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


def _state(status: str, v: Verdict, target: str, position: int | None, ahead: tuple[int, ...],
           landed_url: str | None) -> list[str]:
    if status == "queued":
        where = f": number {position} in the queue" if position else ""
        before = (", after candidate" + ("s " if len(ahead) > 1 else " ") + ", ".join(str(a) for a in ahead[:10])
                  + (" and more" if len(ahead) > 10 else "")) if ahead else ""
        return [f"**Queued** for landing on `{target}`{where}{before}."]
    if status == "verifying":
        return [f"**Verifying** the merged commit `{(v.merged_sha or '')[:12]}` against `{target}`."
                if v.merged_sha else f"**Verifying** the merge onto `{target}`."]
    if status == "landing":
        return [f"**Verified**; landing on `{target}`."]
    if status == "parked":
        return [f"**Parked**: {v.message}", "", f"**Next:** {v.next}"]
    if status == "awaiting_approval":
        return [f"**Awaiting approval**: {v.message}"]
    if status == "landed":
        record = f" ([landed record]({landed_url}))" if landed_url else ""
        return [f"**Landed** on `{target}` as `{(v.merged_sha or '')[:12]}`{record}."]
    if status == "rejected":
        out = [f"**Rejected** (`{v.kind}`): {v.message}", "", f"**Next:** {v.next}"]
        if v.failing_tests:
            out += ["", "Failing tests: " + ", ".join(f"`{t}`" for t in v.failing_tests[:20])]
        if v.paths:
            out += ["", "Paths: " + ", ".join(f"`{p}`" for p in v.paths[:20])]
        return out
    return [f"**{status.capitalize()}**: {v.message}"]
