"""Request bodies of the JSON API. Limits here are the ones agents hit first (422 names the field)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from mergebot.auth import Role
from mergebot.forge.commands import PRIORITY_RANGE

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")]
Text = Annotated[str, StringConstraints(min_length=1, max_length=20000)]
Id = Annotated[int, Field(ge=1, le=2**62)]
Glob = Annotated[str, StringConstraints(pattern=r"^[^/\x00-\x1f][^\x00-\x1f]{0,499}$")]  # a path or glob in the repo
Version = Annotated[int, Field(ge=0, le=2**62)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentIn(Body):
    name: Name
    role: Role = Role.AGENT


class SubtaskIn(Body):
    title: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    description: Annotated[str, StringConstraints(max_length=20000)] = ""
    priority: Annotated[int, Field(ge=-1_000_000, le=1_000_000)] = 0
    parent_id: Id | None = None
    group: Name | None = None
    depends_on: Annotated[list[Id], Field(max_length=1000)] = []
    max_attempts: Annotated[int, Field(ge=1, le=100)] = 3
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    paths: Annotated[list[Glob], Field(max_length=100)] = []  # its footprint: the paths it is expected to touch
    allow_duplicate: bool = False  # create it even if it nearly matches an open subtask


class TreeIn(Body):
    subtasks: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=10000)]
    key_prefix: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = None
    allow_duplicate: bool = False


class Complete(Body):
    id: Id
    claim_version: Version
    sha: Sha | None = None


class ClaimIn(Body):
    complete: Complete | None = None
    wait: Annotated[float, Field(ge=0, le=60)] = 0.0  # seconds to wait for work when nothing is ready
    # The repository the work will be pushed to: the claim's lane for admission control (none: any lane).
    repo: Name | None = None


class FenceIn(Body):
    claim_version: Version


class ForecastIn(Body):
    repo: Name
    sha: Sha | None = None  # a pushed commit: its paths, and merges with main and the candidates that share them
    paths: Annotated[list[Glob], Field(max_length=1000)] = []  # else (not pushed yet): the paths it changes


class TouchIn(FenceIn):
    paths: Annotated[list[Glob], Field(min_length=1, max_length=100)]


class ReleaseIn(FenceIn):
    reason: Annotated[str, StringConstraints(max_length=2000)] | None = None


class SubmitIn(FenceIn):
    sha: Sha | None = None


class NoteIn(Body):
    body: Text
    claim_version: Version | None = None


class BoardNoteIn(Body):
    body: Text
    group: Name | None = None


class ReasonIn(Body):
    reason: Annotated[str, StringConstraints(min_length=1, max_length=2000)]


class PauseIn(Body):
    """Why a repository's landing is held (optional: without it the reason names who paused it)."""
    reason: Annotated[str, StringConstraints(min_length=1, max_length=2000)] | None = None


class PriorityIn(Body):
    """A subtask's priority, as ``@mergebot priority N`` takes it: the queue takes higher first."""
    priority: Annotated[int, Field(ge=PRIORITY_RANGE.start, le=PRIORITY_RANGE.stop - 1)]


class AcceptanceFile(Body):
    path: Annotated[str, StringConstraints(min_length=1, max_length=1000)]
    text: Annotated[str, StringConstraints(max_length=1 << 20)]


class AcceptanceIn(Body):
    """A subtask's acceptance tests (replacing any it had), and the repository to check them on main in."""

    repo: Name
    files: Annotated[list[AcceptanceFile], Field(max_length=50)]


class AllowIn(Body):
    """What a lead or admin allows a subtask (a field not given stays as it is)."""

    test_removal: bool | None = None
    check_changes: bool | None = None
    behaviour_change: bool | None = None


class WaitIn(Body):
    ids: Annotated[list[Id], Field(min_length=1, max_length=1000)]
    timeout: Annotated[float, Field(ge=0, le=60)] = 30.0


class GroupIn(Body):
    description: Annotated[str, StringConstraints(max_length=4000)] | None = None
    open: bool | None = None


class AssignmentIn(Body):
    group: Name
    group_role: Annotated[str, StringConstraints(pattern=r"^(leader|helper)$")] = "helper"
