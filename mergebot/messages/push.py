"""What a push is told at push time (``mergebot.landing.intake.checks``, ``prereceive``), and the forecast.

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mergebot.messages.refs import PATTERN as SUBTASK_BRANCH
from mergebot.messages.words import _short, _shown

# -- push refusals (``mergebot.landing.intake.checks``) ----------------------------------------------------------------


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
    return (f"{ref}: claim version {version} does not exist yet; subtask {subtask_id} is at claim version {current}. "
            "Push to the branch your claim names (`mergebot submit` does), or claim it first (`mergebot start`).")


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


def check_config(ref: str, paths: list[str], target_branch: str, *, allowed: bool,
                 shadowed: Sequence[tuple[str, str]] = ()) -> str:
    if allowed:  # only the verifier's own plugin's name is refused on an allowed subtask
        return (f"refused {ref}: {_shown(paths, 10)} would shadow the verifier's own pytest plugin "
                "(mergebot_outcomes): no change may add a module of that name.")
    why = "".join(f" {path} would be imported instead of the module {module} of the check's Python (rename it)."
                  for path, module in list(shadowed)[:5])
    return (f"refused {ref}: it changes what decides how the check runs ({_shown(paths, 10)}).{why} The check runs "
            f"as {target_branch} configures it: take those changes out (`git restore --source origin/{target_branch} "
            "-- PATH`), or ask a lead to allow this subtask to change the check (`mergebot allow ID --check-changes`).")


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


def _lines(findings: Sequence[Any], most: int) -> str:
    shown = [f"{f['path']}:{f['line']} ({f['rule']}): {f['text']}" for f in list(findings)[:most]]
    more = len(findings) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def suspicious(ref: str, findings: Sequence[Any]) -> str:
    return (f"refused {ref}: its non-test code reaches into the machinery that checks it: {_lines(findings, 5)}. "
            "This repository refuses that: take those lines out, or ask a lead to allow this subtask to change the "
            "check (`mergebot allow ID --check-changes`).")


def suspicious_warning(subtask_id: int, findings: Sequence[Any]) -> str:
    return (f"Mergebot: warning: subtask {subtask_id}'s non-test code reaches into the machinery that checks it "
            f"({_lines(findings, 3)}): its verdict and page name these lines for reviewers.")


def forecast(f: Any, target_branch: str) -> list[str]:
    """The forecast (``mergebot.landing.intake.forecast.Forecast``) as lines for the pusher; none when it is quiet."""
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
    if "landed_id" in twin:
        return (f"subtask {twin['subtask_id']} {str(twin['title'])!r} (landed record {twin['landed_id']}, landed at "
                f"{twin['landed_at']}: `mergebot landed --subtask {twin['subtask_id']}`)")
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


def never_claimed(ref: str, subtask_id: int, status: str) -> str:
    """A push to a claim version of a subtask nobody has ever claimed (it is at claim version 0)."""
    return (f"{ref}: subtask {subtask_id} has never been claimed (it is {status}), so this branch is nobody's. "
            "Claim first (`mergebot start --repo REPO --dir DIR` claims the next ready subtask and prepares a "
            "worktree on the branch its claim names), then `mergebot submit` there.")


def refused_next(nexts: Sequence[str]) -> list[str]:
    """After a refused push's sentences, for a person (``git push``): what to do next, once per distinct step."""
    return [f"Next: {n}" for n in nexts]
