"""Subtasks: create, claim, and the owner's fenced writes (heartbeat, release, submit, notes)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from mergebot import messages as say
from mergebot.api.deps import After, Claimer, Creator, DbDep, Limit, Manager, Noter, Reader, ServicesDep
from mergebot.api.errors import ERROR_RESPONSES
from mergebot.api.schemas import (
    AcceptanceIn,
    AllowIn,
    ClaimIn,
    FenceIn,
    ForecastIn,
    NoteIn,
    PriorityIn,
    ReasonIn,
    ReleaseIn,
    SubmitIn,
    SubtaskIn,
    TouchIn,
    TreeIn,
    WaitIn,
)
from mergebot.auth import Role
from mergebot.errors import Duplicate, Invalid
from mergebot.git import repo as git
from mergebot.landing.intake import prereceive
from mergebot.landing.intake.forecast import forecast as forecast_of
from mergebot.landing.judge import acceptance, told
from mergebot.messages.refs import subtask_branch
from mergebot.models import Handle, Subtask, record
from mergebot.tree import parse_tree

router = APIRouter(prefix="/api/v1/subtasks", tags=["subtasks"], responses=ERROR_RESPONSES)

Status = Annotated[str | None, Query(pattern="^(blocked|ready|running|submitted|landed|failed|cancelled)$")]
Sha = Annotated[str, Query(pattern="^[0-9a-fA-F]{7,64}$")]


def claim_body(sub: Subtask, handoff: list[dict[str, Any]], overlaps: list[dict[str, Any]] | None = None
               ) -> dict[str, Any]:
    previous = None
    if sub.previous_owner_id is not None and sub.claim_version > 1:
        previous = {"owner_id": sub.previous_owner_id, "branch": subtask_branch(sub.id, sub.claim_version - 1)}
    return {
        "subtask": record(sub),
        "handle": {"id": sub.id, "claim_version": sub.claim_version},
        "branch": subtask_branch(sub.id, sub.claim_version),
        "lease_expires_at": sub.lease_expires_at,
        "handoff": {"previous": previous, "notes": handoff, "last_reason": sub.status_reason},
        "overlaps": overlaps or [],  # subtasks in flight whose footprints may overlap this one's, with owners
    }


@router.post("", status_code=201, summary="Create a subtask (idempotent with idempotency_key; 409 duplicate when it "
             "nearly matches an open one, unless allow_duplicate)")
async def create(body: SubtaskIn, agent: Creator, db: DbDep, response: Response) -> dict[str, Any]:
    if not body.allow_duplicate:  # a retry with its idempotency key is that subtask, not a twin of it
        pairs = await db.subtasks.likely_twins([(body.idempotency_key or "", body.title, body.description)],
                                               key_prefix="" if body.idempotency_key else None)
        if pairs:
            raise Duplicate(say.twin_subtask(body.title, pairs[0]["twin"], pairs[0]["similarity"]),
                            field="allow_duplicate", twins=pairs)
    sub, created = await db.subtasks.create_subtask(
        actor_id=agent.id, title=body.title, description=body.description, priority=body.priority,
        parent_id=body.parent_id, group_name=body.group, depends_on=body.depends_on,
        max_attempts=body.max_attempts, idempotency_key=body.idempotency_key, paths=body.paths)
    if not created:
        response.status_code = status.HTTP_200_OK
    return {"subtask": record(sub), "created": created}


@router.post("/batch", status_code=201, summary="Create a task tree with dependencies, all or nothing")
async def create_tree(body: TreeIn, agent: Creator, db: DbDep) -> dict[str, Any]:
    nodes = parse_tree(body.subtasks)
    if not body.allow_duplicate:
        pairs = await db.subtasks.likely_twins([(n.key, n.title, n.description) for n in nodes],
                                               key_prefix=body.key_prefix)
        if pairs:  # every pair at once, before anything is written
            raise Duplicate(say.twin_subtasks(pairs), field="allow_duplicate", twins=pairs)
    made = await db.subtasks.create_tree(actor_id=agent.id, nodes=nodes, key_prefix=body.key_prefix)
    return {"subtasks": {key: {"id": s.id, "status": s.status} for key, s in made.items()}}


@router.get("", summary="List subtasks (paged by id)")
async def list_subtasks(agent: Reader, db: DbDep, status: Status = None, group: str | None = None, after: After = 0,
                        limit: Limit = 100) -> dict[str, Any]:
    rows = await db.subtasks.list_subtasks(status=status, group_name=group, after_id=after, limit=limit)
    return {"subtasks": rows, "next_after": rows[-1]["id"] if len(rows) == limit else None}


@router.post("/claim", summary="Claim the best ready subtask (204 when nothing is ready; with wait=S, held up "
             "to S seconds until something is; 429 with kind capacity or wip_limit when not admitted)",
             responses={204: {"description": "nothing is ready"}})
async def claim(agent: Claimer, services: ServicesDep, body: ClaimIn | None = None) -> Any:
    db = services.db
    complete = body.complete if body else None
    wait = body.wait if body else 0.0
    # Admission control and the agent's cap (429, typed: kind capacity or wip_limit); a claim with wait waits.
    refused, waited = await services.admission.admit(db, agent_id=agent.id, name=agent.name, role=agent.role,
                                                     repo=body.repo if body else None, wait=wait)
    if refused is not None:
        if complete:  # the work it completes is submitted all the same
            await db.subtasks.submit(agent_id=agent.id, handle=Handle(complete.id, complete.claim_version),
                                     sha=complete.sha)
        raise refused.error(complete.id if complete else None)
    sub = await db.subtasks.claim(
        agent_id=agent.id,
        complete=Handle(complete.id, complete.claim_version) if complete else None,
        sha=complete.sha if complete else None, wait=max(0.0, wait - waited))
    if sub is None:
        return Response(status_code=204)
    await services.admission.claimed(db, agent.id, subtask_id=sub.id, repo=body.repo if body else None)
    handoff = await db.subtasks.handoff(sub.id) if sub.claim_version > 1 else []
    return claim_body(sub, handoff, await db.subtasks.overlapping(sub.id, sub.paths))


@router.post("/wait", summary="Wait until subtasks are landed, failed or cancelled (long poll)")
async def wait(body: WaitIn, agent: Reader, db: DbDep) -> dict[str, Any]:
    statuses = await db.subtasks.wait(body.ids, timeout=body.timeout)
    done = all(s in ("landed", "failed", "cancelled") for s in statuses.values())
    return {"done": done, "statuses": {str(k): v for k, v in statuses.items()}}


@router.get("/{subtask_id}", summary="One subtask with its owner and dependencies")
async def get(subtask_id: int, agent: Reader, db: DbDep) -> dict[str, Any]:
    return {"subtask": await told.subtask_record(db, await db.subtasks.get_subtask(subtask_id))}


@router.get("/{subtask_id}/verdict", summary="The verdict of one commit of the subtask (`sha`: its head commit, or "
            "a prefix of 7 or more): that commit's newest candidate with its typed verdict, never a newer or older "
            "push's (`unknown` while it has none); with wait=S, held until that commit reaches a verdict (landed, "
            "rejected, superseded, cancelled, parked, awaiting_approval) or S seconds pass (long poll)")
async def commit_verdict(subtask_id: int, agent: Reader, db: DbDep, sha: Sha,
                         wait: Annotated[float, Query(ge=0, le=60)] = 0) -> dict[str, Any]:
    await db.subtasks.get_subtask(subtask_id)  # NotFound for a subtask that does not exist
    sha = sha.lower()
    cand = (await db.landing.wait_commit(subtask_id=subtask_id, sha=sha, timeout=wait) if wait > 0
            else await db.landing.commit_candidate(subtask_id=subtask_id, sha=sha))
    return await told.commit_record(db, subtask_id, sha, cand)


@router.get("/{subtask_id}/events", summary="The subtask's event log")
async def events(subtask_id: int, agent: Reader, db: DbDep, after: After = 0, limit: Limit = 100) -> dict[str, Any]:
    return {"events": await db.subtasks.events(subtask_id=subtask_id, after_id=after, limit=limit)}


@router.post("/{subtask_id}/heartbeat", summary="Renew the lease (owner, fenced)")
async def heartbeat(subtask_id: int, body: FenceIn, agent: Claimer, db: DbDep) -> dict[str, Any]:
    sub = await db.subtasks.heartbeat(agent_id=agent.id, handle=Handle(subtask_id, body.claim_version))
    return {"id": sub.id, "claim_version": sub.claim_version, "status": sub.status,
            "lease_expires_at": sub.lease_expires_at}


@router.post("/{subtask_id}/touch", summary="Add paths you expect to touch to the subtask's footprint (owner, "
             "fenced); answers with the subtasks in flight that overlap it")
async def touch(subtask_id: int, body: TouchIn, agent: Claimer, db: DbDep) -> dict[str, Any]:
    sub = await db.subtasks.touch(agent_id=agent.id, handle=Handle(subtask_id, body.claim_version), paths=body.paths)
    return {"subtask": record(sub), "overlaps": await db.subtasks.overlapping(sub.id, sub.paths)}


@router.post("/{subtask_id}/forecast", summary="Who else touches what this change touches: live candidates and "
             "running claims, and whether it already conflicts with main or with them")
async def forecast(subtask_id: int, body: ForecastIn, agent: Reader, services: ServicesDep) -> dict[str, Any]:
    db = services.db
    repo = await db.repos.get_repo(body.repo)
    f = await forecast_of(db, git.bare_path(services.root, repo.name), repo, subtask_id, sha=body.sha,
                          paths=body.paths)
    return {"forecast": record(f), "lines": say.forecast(f, repo.target_branch)}


@router.post("/{subtask_id}/release", summary="Give the subtask back (owner, fenced)")
async def release(subtask_id: int, body: ReleaseIn, agent: Claimer, db: DbDep) -> dict[str, Any]:
    sub = await db.subtasks.release(agent_id=agent.id, handle=Handle(subtask_id, body.claim_version),
                                    reason=body.reason)
    return {"subtask": record(sub)}


@router.post("/{subtask_id}/submit", summary="Mark the work done with its commit (owner, fenced)")
async def submit(subtask_id: int, body: SubmitIn, agent: Claimer, db: DbDep) -> dict[str, Any]:
    sub = await db.subtasks.submit(agent_id=agent.id, handle=Handle(subtask_id, body.claim_version), sha=body.sha)
    return {"subtask": record(sub)}


@router.post("/{subtask_id}/submit-again", summary="Queue the claim's branch tip once more, without a new commit "
             "(owner, fenced; twice is once)")
async def submit_again(subtask_id: int, body: FenceIn, agent: Claimer, services: ServicesDep) -> dict[str, Any]:
    cand, already = await prereceive.submit_again(services.db, services.root, agent, subtask_id, body.claim_version)
    if already:  # that tip is queued or running: nothing queued, judged or run again
        return await told.already_record(services.db, cand)
    services.queue.poke()
    return {"candidate": await told.candidate_record(services.db, cand), "already": False}


@router.post("/{subtask_id}/notes", status_code=201, summary="Leave a note (fenced when claim_version given)")
async def add_note(subtask_id: int, body: NoteIn, agent: Noter, db: DbDep) -> dict[str, Any]:
    if body.claim_version is None and agent.role == Role.AGENT:
        # An agent's note on a subtask is an owner write: it must prove its claim.
        raise Invalid("claim_version is required for an agent's note on a subtask", field="claim_version")
    await db.subtasks.get_subtask(subtask_id)
    return {"note": await db.subtasks.add_note(author_id=agent.id, subtask_id=subtask_id,
                                               claim_version=body.claim_version, body=body.body)}


@router.get("/{subtask_id}/notes", summary="Notes on a subtask, oldest first (the handoff)")
async def notes(subtask_id: int, agent: Reader, db: DbDep, after: After = 0, limit: Limit = 100) -> dict[str, Any]:
    return {"notes": await db.subtasks.notes(subtask_id=subtask_id, after_id=after, limit=limit)}


@router.post("/{subtask_id}/cancel", summary="Cancel a subtask (lead or admin)")
async def cancel(subtask_id: int, body: ReasonIn, agent: Manager, db: DbDep) -> dict[str, Any]:
    return {"subtask": record(await db.subtasks.cancel(subtask_id=subtask_id, reason=body.reason, actor_id=agent.id))}


@router.post("/{subtask_id}/allow", summary="Allow a subtask what its owner may not decide: to remove tests, to "
             "change what configures the check (lead or admin)")
async def allow(subtask_id: int, body: AllowIn, agent: Manager, db: DbDep) -> dict[str, Any]:
    return {"subtask": record(await db.subtasks.allow(subtask_id=subtask_id, actor_id=agent.id,
                                                      test_removal=body.test_removal,
                                                      check_changes=body.check_changes,
                                                      behaviour_change=body.behaviour_change))}


@router.put("/{subtask_id}/acceptance", summary="Attach acceptance tests, replacing any (lead or admin): written into "
            "every merge of the subtask's candidates, they must pass; they run once on main now (the probe)")
async def set_acceptance(subtask_id: int, body: AcceptanceIn, agent: Manager, db: DbDep,
                         services: ServicesDep) -> dict[str, Any]:
    repo = await db.repos.get_repo(body.repo)
    job = await acceptance.attach(db, repo, git.bare_path(services.root, repo.name), subtask_id=subtask_id,
                                  files=[(f.path, f.text.encode()) for f in body.files], actor_id=agent.id)
    return {"paths": sorted(f.path for f in body.files), "probe_job": job}


@router.get("/{subtask_id}/acceptance", summary="The subtask's acceptance tests (its contract) and what their run on "
            "main said")
async def get_acceptance(subtask_id: int, agent: Reader, db: DbDep) -> dict[str, Any]:
    sub = await db.subtasks.get_subtask(subtask_id)
    files = await db.subtasks.acceptance(subtask_id)
    job = await db.jobs.get_job(sub.acceptance_probe) if sub.acceptance_probe else None
    return {"files": [{"path": p, "text": c.decode("utf-8", "replace")} for p, c in files],
            "probe": acceptance.probe(job, [p for p, _ in files])}


@router.post("/{subtask_id}/retry", summary="Give a failed subtask another round (lead or admin); while a candidate "
             "of the subtask is queued or running, a no-op that names it (`already`)")
async def retry(subtask_id: int, body: ReasonIn, agent: Manager, db: DbDep) -> dict[str, Any]:
    live = await db.landing.in_flight(subtask_id)
    if live is not None:  # never cancel or restart a run in flight: wait for it
        return {"subtask": record(await db.subtasks.get_subtask(subtask_id)), **await told.already_record(db, live)}
    return {"subtask": record(await db.subtasks.retry(subtask_id=subtask_id, reason=body.reason, actor_id=agent.id))}


@router.post("/{subtask_id}/priority", summary="Set a subtask's priority, and its waiting candidates' (lead or admin; "
             "`@mergebot priority N`): the queue takes higher first")
async def priority(subtask_id: int, body: PriorityIn, agent: Manager, services: ServicesDep) -> dict[str, Any]:
    db = services.db
    await db.subtasks.get_subtask(subtask_id)  # NotFound for a subtask that does not exist
    moved = await db.forge.set_priority(subtask_id=subtask_id, priority=body.priority, actor_id=agent.id)
    services.queue.poke()  # the waiting order may have changed
    return {"subtask": record(await db.subtasks.get_subtask(subtask_id)), "candidates_moved": moved}
