"""The Gitea routes of the stand-in (under ``/api/v1``): commit statuses and pull requests, in the shapes of
Gitea's swagger (``gitea_schema.py``)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from tests.support.forge_standin.core import PostedStatus, StandinCore
from tests.support.forge_standin.gitea_schema import GITEA_STATES, Json


class GiteaRoutes(StandinCore):
    """Gitea's REST endpoints."""

    def _gt_status_body(self, status: PostedStatus) -> dict[str, Any]:
        return {
            "id": status.id,
            "status": status.state,
            "target_url": status.target_url or "",
            "description": status.description or "",
            "url": f"{self.url}/api/v1/repos/{status.owner}/{status.repo}/statuses/{status.sha}",
            "context": status.context,
            "creator": self._gt_user(),
            "created_at": status.created_at,
            "updated_at": status.created_at,
        }

    async def _gt_create(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        if not isinstance(body, dict):
            return self._error("gitea", 422, "invalid JSON body")
        if body.get("state") not in GITEA_STATES:
            return self._error("gitea", 422, f"invalid state {body.get('state')!r}")
        for key in ("target_url", "description", "context"):
            if body.get(key) is not None and not isinstance(body[key], str):
                return self._error("gitea", 422, f"{key} must be a string")
        status = self._record_status("gitea", owner, repo, request.path_params["sha"], body, default_context="default")
        return self._json("gitea", self._gt_status_body(status), 201)

    async def _gt_list(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        posted = self._posted("gitea", owner, repo, request.path_params["sha"])
        return self._json("gitea", [self._gt_status_body(s) for s in posted])

    async def _gt_pull(self, request: Request, body: Json) -> Response:
        found = self._pull_state(request)
        if found is None:
            return self._error("gitea", 404, "The target couldn't be found.")
        owner, repo, number, pull, base_tip = found
        merged = pull.merged_at is not None
        web = f"{self.url}/{owner}/{repo}/pulls/{number}"
        data = {
            "id": 100000 + number,
            "url": web,
            "number": number,
            "user": self._gt_user(),
            "title": f"Pull request {number}",
            "body": "",
            "state": "closed" if merged else "open",
            "is_locked": False,
            "comments": 0,
            "html_url": web,
            "diff_url": f"{web}.diff",
            "patch_url": f"{web}.patch",
            "mergeable": not merged,
            "merged": merged,
            "merged_at": pull.merged_at,
            "merge_commit_sha": pull.head_sha if merged else None,
            "merged_by": self._gt_user() if merged else None,
            "base": {"label": pull.base_ref, "ref": pull.base_ref, "sha": base_tip or "", "repo_id": 1},
            "head": {"label": pull.head_ref, "ref": pull.head_ref, "sha": pull.head_sha, "repo_id": 1},
            "merge_base": base_tip or "",
            "created_at": pull.created_at,
            "updated_at": pull.merged_at or pull.created_at,
            "closed_at": pull.merged_at,
        }
        return self._json("gitea", data)
