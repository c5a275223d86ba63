"""The issue-comment routes of the stand-in, for both forges (a pull request is an issue on both): list, create
and edit, each request body validated against the forge's own schema."""

from __future__ import annotations

from typing import Any

import jsonschema
from starlette.requests import Request
from starlette.responses import Response

from tests.support.forge_standin.core import StandinCore, utc_now
from tests.support.forge_standin.gitea_schema import validate_gitea
from tests.support.forge_standin.github_schema import (
    ISSUE_COMMENT,
    ISSUE_COMMENTS,
    Json,
    github_example,
    github_request_problem,
)


class CommentRoutes(StandinCore):
    """Issue comments: GitHub's at the root, Gitea's under ``/api/v1``."""

    def _comment_body(self, forge: str, owner: str, repo: str, comment_id: int) -> dict[str, Any]:
        c = self._comments[comment_id]
        if forge == "github":
            data: dict[str, Any] = self._localize(github_example(ISSUE_COMMENTS, "post", 201), owner, repo)
            data |= {"id": comment_id, "node_id": f"IC_standin{comment_id}", "body": c["body"],
                     "url": f"{self.url}/repos/{owner}/{repo}/issues/comments/{comment_id}",
                     "issue_url": f"{self.url}/repos/{owner}/{repo}/issues/{c['number']}",
                     "created_at": c["created_at"], "updated_at": utc_now()}
            if "user" in data:
                data["user"] = self._gh_user(data["user"])
            return data
        return {"id": comment_id, "body": c["body"], "user": self._gt_user(), "html_url": "",
                "issue_url": f"{self.url}/api/v1/repos/{owner}/{repo}/issues/{c['number']}",
                "created_at": c["created_at"], "updated_at": utc_now()}

    def _comment_refused(self, forge: str, path: str, method: str, body: Json) -> Response | None:
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return self._error(forge, 422, "body is required")
        if forge == "github":
            problem = github_request_problem(path, method, body)
            if problem is not None:
                return self._error("github", 422, f"Invalid request.\n\n{problem}")
        else:
            try:
                validate_gitea("IssueCommentOption", body)
            except jsonschema.ValidationError as e:
                return self._error("gitea", 422, e.message)
        return None

    async def _list_comments(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        forge, number = self._forge_of(request), request.path_params["number"]
        page = int(request.query_params.get("page", "1"))
        per = int(request.query_params.get("per_page", "30" if forge == "github" else "50"))
        with self._lock:
            ids = [i for i, c in self._comments.items() if c["number"] == number and c["forge"] == forge]
            shown = [self._comment_body(forge, owner, repo, i) for i in ids[(page - 1) * per: page * per]]
        return self._json(forge, shown)

    def _comment_call(self, request: Request, body: Json, path: str, method: str,
                      key: str) -> tuple[str, str, str, Any, Response | None]:
        """A create or edit: the forge, owner, repo, the path's ``key``, and the refusal its body earns (or None)."""
        owner, repo = self._params(request)
        forge = self._forge_of(request)
        return forge, owner, repo, request.path_params[key], self._comment_refused(forge, path, method, body)

    async def _create_comment(self, request: Request, body: Json) -> Response:
        forge, owner, repo, number, refused = self._comment_call(request, body, ISSUE_COMMENTS, "post", "number")
        if refused is not None:
            return refused
        with self._lock:
            comment_id = next(self._ids)
            self._comments[comment_id] = {"forge": forge, "owner": owner, "repo": repo, "number": number,
                                          "body": body["body"], "edits": 0, "created_at": utc_now()}
            data = self._comment_body(forge, owner, repo, comment_id)
        return self._json(forge, data, 201)

    async def _edit_comment(self, request: Request, body: Json) -> Response:
        forge, owner, repo, comment_id, refused = self._comment_call(request, body, ISSUE_COMMENT, "patch",
                                                                     "comment_id")
        if refused is not None:
            return refused
        with self._lock:
            if comment_id not in self._comments:
                return self._error(forge, 404, "Not Found")
            self._comments[comment_id]["body"] = body["body"]
            self._comments[comment_id]["edits"] += 1
            data = self._comment_body(forge, owner, repo, comment_id)
        return self._json(forge, data)

    # ---- git over HTTP, as GitHub serves it: Basic credentials x-access-token:TOKEN, else 401
