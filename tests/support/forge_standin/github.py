"""The GitHub routes of the stand-in: repositories, commit statuses, pull requests, the App's installation and
tokens, and check runs; bodies built from GitHub's documented examples with the relevant fields filled in."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from tests.support.forge_standin.core import PostedStatus, StandinCore, run_git, utc_now
from tests.support.forge_standin.github_schema import (
    ACCESS_TOKENS,
    CHECK_RUN,
    CHECK_RUNS,
    COMBINED_STATUS,
    CREATE_STATUS,
    GITHUB_DESCRIPTION_LIMIT,
    GITHUB_STATES,
    INSTALLATION,
    LIST_STATUSES,
    PULL,
    REPO,
    Json,
    github_example,
    github_request_problem,
)


class GitHubRoutes(StandinCore):
    """GitHub's REST endpoints (served at the stand-in's root)."""

    # ---- GitHub App authentication

    async def _gh_installation(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        assert self.app is not None
        data = self._localize(github_example(INSTALLATION, "get", 200), owner, repo)
        data |= {"id": self.app.installation_id, "app_id": self.app.app_id, "target_type": "Organization"}
        data["account"] = self._gh_user(data["account"]) | {"login": owner}
        return self._json("github", data)

    async def _gh_access_token(self, request: Request, body: Json) -> Response:
        assert self.app is not None
        if request.path_params["installation_id"] != self.app.installation_id:
            return self._error("github", 404, "Not Found")
        token = f"ghs_standin{next(self._ids):04d}{'x' * 24}"
        with self._lock:
            self._minted[token] = True
        expires = datetime.fromtimestamp(datetime.now(UTC).timestamp() + self.app.token_lifetime_s, UTC)
        data = github_example(ACCESS_TOKENS, "post", 201) | {"token": token,
                                                              "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}
        data.pop("repositories", None)  # all of the installation's repositories, as with no list asked for
        data["repository_selection"] = "all"
        return self._json("github", data, 201)

    # ---- check runs: an App's installation token only, bodies as GitHub's description has them

    def _check_run_refused(self, request: Request, body: Json, path: str, method: str) -> Response | None:
        credential = request.headers.get("authorization", "").partition(" ")[2]
        with self._lock:
            app_token = self._minted.get(credential, False)
        if not app_token:
            return self._error("github", 403, "You must authenticate via a GitHub App.")
        if not isinstance(body, dict):
            return self._error("github", 400, "Problems parsing JSON")
        problem = github_request_problem(path, method, body)
        if problem is not None:
            return self._error("github", 422, f"Invalid request.\n\n{problem}")
        return None

    def _check_run_body(self, owner: str, repo: str, check_run_id: int) -> dict[str, Any]:
        sent = self._check_runs[check_run_id]
        merged: dict[str, Any] = {}
        for b in sent:  # an update changes what it names, as GitHub's does
            merged |= {k: v for k, v in b.items() if k != "output"}
            if "output" in b:
                merged["output"] = b["output"]
        data = self._localize(github_example(CHECK_RUNS, "post", 201), owner, repo)
        output = merged.get("output") or {}
        data |= {"id": check_run_id, "head_sha": sent[0]["head_sha"], "name": merged.get("name", data["name"]),
                 "status": merged.get("status", "queued"), "conclusion": merged.get("conclusion"),
                 "external_id": merged.get("external_id", ""), "details_url": merged.get("details_url"),
                 "started_at": data.get("started_at"),
                 "completed_at": utc_now() if merged.get("status") == "completed" else None}
        data["output"] = data["output"] | {"title": output.get("title"), "summary": output.get("summary"),
                                           "text": output.get("text"),
                                           "annotations_count": len(output.get("annotations") or [])}
        return data

    async def _gh_create_check_run(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        refused = self._check_run_refused(request, body, CHECK_RUNS, "post")
        if refused is not None:
            return refused
        if self.bare_repo is not None and run_git(self.bare_repo, "cat-file", "-e", f"{body['head_sha']}^{{commit}}"
                                               ).returncode != 0:
            return self._error("github", 422, "No commit found for SHA: " + str(body["head_sha"]))
        with self._lock:
            check_run_id = next(self._ids)
            self._check_runs[check_run_id] = [body]
            data = self._check_run_body(owner, repo, check_run_id)
        return self._json("github", data, 201)

    async def _gh_update_check_run(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        check_run_id = request.path_params["check_run_id"]
        refused = self._check_run_refused(request, body, CHECK_RUN, "patch")
        if refused is not None:
            return refused
        with self._lock:
            if check_run_id not in self._check_runs:
                return self._error("github", 404, "Not Found")
            self._check_runs[check_run_id].append(body)
            data = self._check_run_body(owner, repo, check_run_id)
        return self._json("github", data)

    # ---- repositories, commit statuses, pull requests

    def _gh_status_body(self, status: PostedStatus, template: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = self._localize(template, status.owner, status.repo)
        body |= {
            "url": f"{self.url}/repos/{status.owner}/{status.repo}/statuses/{status.sha}",
            "avatar_url": None,
            "id": status.id,
            "node_id": f"SC_standin{status.id}",
            "state": status.state,
            "description": status.description,
            "target_url": status.target_url,
            "context": status.context,
            "created_at": status.created_at,
            "updated_at": status.created_at,
        }
        if "creator" in body:
            body["creator"] = self._gh_user(body["creator"])
        return body

    async def _gh_repo(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        data = self._localize(github_example(REPO, "get", 200), owner, repo)
        # The published example lacks the required "language" and shows a fork ("parent", "source") whose
        # nested repository misses it too; this stand-in's repositories are not forks.
        data |= {"name": repo, "full_name": f"{owner}/{repo}", "default_branch": self._default_branch()}
        data |= {"fork": False, "language": None}
        data.pop("parent", None)
        data.pop("source", None)
        data["owner"]["login"] = owner
        return self._json("github", data)

    async def _gh_create_status(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        sha = request.path_params["sha"]
        if not isinstance(body, dict):
            return self._error("github", 400, "Problems parsing JSON")
        if body.get("state") not in GITHUB_STATES:
            message = "state is not included in the list"
            error = {"resource": "Status", "code": "custom", "field": "state", "message": message}
            return self._error("github", 422, "Validation Failed", [error])
        description = body.get("description")
        if isinstance(description, str) and len(description) > GITHUB_DESCRIPTION_LIMIT:
            message = f"description is too long (maximum is {GITHUB_DESCRIPTION_LIMIT} characters)"
            error = {"resource": "Status", "code": "custom", "field": "description", "message": message}
            return self._error("github", 422, "Validation Failed", [error])
        problem = github_request_problem(CREATE_STATUS, "post", body)
        if problem is not None:
            return self._error("github", 422, f"Invalid request.\n\n{problem}")
        status = self._record_status("github", owner, repo, sha, body, default_context="default")
        data = self._gh_status_body(status, github_example(CREATE_STATUS, "post", 201))
        return self._json("github", data, 201, headers={"Location": data["url"]})


    async def _gh_list(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        template = github_example(LIST_STATUSES, "get", 200)[0]
        posted = self._posted("github", owner, repo, request.path_params["ref"])
        return self._json("github", [self._gh_status_body(s, template) for s in posted])

    async def _gh_combined(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        ref = request.path_params["ref"]
        data = self._localize(github_example(COMBINED_STATUS, "get", 200), owner, repo)
        latest: dict[str, PostedStatus] = {}
        for s in self._posted("github", owner, repo, ref):
            latest.setdefault(s.context, s)
        states = {s.state for s in latest.values()}
        if states & {"error", "failure"}:
            state = "failure"
        elif not states or "pending" in states:
            state = "pending"
        else:
            state = "success"
        template = data["statuses"][0]
        data |= {
            "state": state,
            "statuses": [self._gh_status_body(s, template) for s in latest.values()],
            "sha": ref,
            "total_count": len(latest),
            "commit_url": f"{self.url}/repos/{owner}/{repo}/commits/{ref}",
            "url": f"{self.url}/repos/{owner}/{repo}/commits/{ref}/status",
        }
        data["repository"] |= {"name": repo, "full_name": f"{owner}/{repo}"}
        data["repository"]["owner"]["login"] = owner
        return self._json("github", data)

    async def _gh_pull(self, request: Request, body: Json) -> Response:
        found = self._pull_state(request)
        if found is None:
            return self._error("github", 404, "Not Found")
        owner, repo, number, pull, base_tip = found
        data = self._localize(github_example(PULL, "get", 200), owner, repo)
        data = json.loads(json.dumps(data).replace("/1347", f"/{number}"))
        merged = pull.merged_at is not None
        data |= {
            "id": 100000 + number,
            "node_id": f"PR_standin{number}",
            "number": number,
            "state": "closed" if merged else "open",
            "locked": False,
            "active_lock_reason": None,
            "created_at": pull.created_at,
            "updated_at": pull.merged_at or pull.created_at,
            "closed_at": pull.merged_at,
            "merged_at": pull.merged_at,
            "merged": merged,
            "merged_by": self._gh_user(data["user"]) if merged else None,
            "merge_commit_sha": pull.head_sha if merged else None,
            "statuses_url": f"{self.url}/repos/{owner}/{repo}/statuses/{pull.head_sha}",
            "mergeable": None if merged else True,
            "mergeable_state": "unknown" if merged else "clean",
            "draft": False,
            # The example's requested team lacks the required "type"; nobody is requested here anyway.
            "requested_reviewers": [],
            "requested_teams": [],
        }
        data["head"] |= {"label": f"{owner}:{pull.head_ref}", "ref": pull.head_ref, "sha": pull.head_sha}
        data["base"] |= {"label": f"{owner}:{pull.base_ref}", "ref": pull.base_ref, "sha": base_tip or pull.head_sha}
        return self._json("github", data)

    # ---- Gitea
