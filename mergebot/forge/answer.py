"""Carrying out a command written in a pull request's comment, and answering it in the pull request's one living
comment (``forge.commands`` says who may give which; this module does it, through the same steps as the API).

A command changes nothing unless it is allowed; either way the answer goes into the comment (never a reply of its
own). A delivery is handled once (the webhook's delivery id), and each step is idempotent: ``retry`` (the owner's
or a lead's) while a commit is queued or running is a no-op that names its candidate, ``cancel`` of a candidate no
longer waiting says so, ``priority`` sets a value.
"""

from __future__ import annotations

from pathlib import Path

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.errors import MergebotError
from mergebot.forge import commands
from mergebot.forge.sansio import PullComment
from mergebot.landing.intake import prereceive
from mergebot.landing.main.approve import approve
from mergebot.messages.refs import parse_subtask_ref
from mergebot.models import Agent, Repo


async def carry_out(db: Database, root: Path, repo: Repo, note: PullComment) -> str:
    """The outcome of a pull request comment, for the delivery's record; the answer, if any, is in the comment."""
    cmd = commands.parse(note.body)
    if cmd is None:
        return say.NO_COMMAND
    pull = await db.forge.pull(repo=repo.name, number=note.number)
    parsed = parse_subtask_ref(pull.head_ref) if pull else None
    if pull is None or parsed is None:
        return say.pull_not_followed(note.number)
    subtask_id, _ = parsed
    forge = repo.forge or note.forge
    agent = await db.forge.agent_for(forge=forge, login=note.sender or "") if note.sender else None
    sub = await db.subtasks.get_subtask(subtask_id)
    owner = agent is not None and sub.owner_id == agent.id
    why = commands.refusal(cmd, login=note.sender, forge=forge, role=str(agent.role) if agent else None,
                           owner=owner)
    full = False
    if why is None:
        assert cmd.name == "why" or agent is not None
        try:
            what, full = await _do(db, root, repo, cmd, sub.id, agent, owner=owner, ref=pull.head_ref,
                                   login=note.sender, review=note.review)
            answer = say.command_done(note.sender, cmd.name, what)
        except MergebotError as e:
            answer = say.command_refused(note.sender, cmd.name, e.message)
    else:
        answer = say.command_refused(note.sender, cmd.name, why)
    await db.forge.pull_answer(repo=repo.name, number=note.number, answer=answer, full=full)
    return answer


async def _do(db: Database, root: Path, repo: Repo, cmd: commands.Command, subtask_id: int, agent: Agent | None,
              *, owner: bool, ref: str, login: str | None, review: bool = False) -> tuple[str, bool]:
    if cmd.name == "why":
        return say.WHOLE_VERDICT_BELOW, True
    assert agent is not None
    sub = await db.subtasks.get_subtask(subtask_id)
    reason = say.command_by(cmd.name, login)
    if cmd.name == "retry":
        if owner:
            cand, already = await prereceive.submit_again(db, root, agent, subtask_id, sub.claim_version)
            if already:  # that commit is queued or running: nothing queued or run again
                return say.already_in_flight(cand.id, cand.status, subtask_id, cand.sha), False
            return say.verifies_again(cand.id, cand.sha), False
        live = await db.landing.in_flight(subtask_id)
        if live is not None:  # a lead's retry never cancels or restarts a run in flight
            return say.already_in_flight(live.id, live.status, subtask_id, live.sha), False
        if sub.status != "failed":
            raise MergebotError(say.retry_not_failed(subtask_id, sub.status))
        await db.subtasks.retry(subtask_id=subtask_id, reason=reason, actor_id=agent.id)
        return say.another_round(subtask_id), False
    if cmd.name == "cancel":
        if owner:
            cands = await db.forge.candidates_on(repo=repo.name, ref=ref)
            newest = cands[-1] if cands else None
            if newest is None or not await db.forge.withdraw(candidate_id=newest.id, reason=reason,
                                                             actor_id=agent.id):
                raise MergebotError(say.nothing_to_withdraw(newest.id if newest else None,
                                                            newest.status if newest else None))
            return say.withdrawn(newest.id), False
        await db.subtasks.cancel(subtask_id=subtask_id, reason=reason, actor_id=agent.id)
        return say.cancelled(subtask_id), False
    if cmd.name == "approve":  # the pull request's newest candidate still in the queue, or waiting for it
        cands = await db.forge.candidates_on(repo=repo.name, ref=ref)
        if not cands:
            raise MergebotError(say.nothing_to_approve(ref))
        cand = await approve(db, cands[-1].id, agent, via="review" if review else "comment", forge_login=login)
        return say.approved(cand.id, cand.sha), False
    assert cmd.name == "priority" and cmd.priority is not None
    moved = await db.forge.set_priority(subtask_id=subtask_id, priority=cmd.priority, actor_id=agent.id)
    return say.priority_set(subtask_id, cmd.priority, moved), False
