"""Mergebot's outbound forge clients against a local stand-in that speaks GitHub's and Gitea's wire format."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mergebot.forge.client import (
    ForgeCallError,
    ForgeClient,
    GiteaClient,
    GitHubClient,
    StatusPost,
    client_for,
    post_with_retry,
)
from tests.support.bot import free_port
from tests.support.forge_standin import ForgeStandin
from tests.support.forge_standin.gitea_schema import validate_gitea
from tests.support.forge_standin.github_schema import (
    COMBINED_STATUS,
    CREATE_STATUS,
    LIST_STATUSES,
    PULL,
    REPO,
    SUBSET_PATH,
    github_subset,
    validate_github_error,
    validate_github_response,
)

TOKEN = "s3cret-token"
REPO_NAME = "acme/widgets"
SHA = "6dcb09b5b57875f334f61aebed695e2e4193db5e"


def git(cwd: Path, *args: str) -> str:
    ident = ["-c", "user.name=Forge Test", "-c", "user.email=forge@test.invalid", "-c", "init.defaultBranch=main"]
    done = subprocess.run(["git", *ident, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(work: Path, name: str) -> str:
    (work / name).write_text(name + "\n")
    git(work, "add", name)
    git(work, "commit", "-q", "-m", f"add {name}")
    return git(work, "rev-parse", "HEAD")


def open_pull(forge: ForgeStandin, work: Path, number: int, branch: str) -> str:
    """A commit on a new ``branch`` off main, pushed and registered as pull ``number`` into main: its sha."""
    git(work, "checkout", "-q", "-b", branch)
    head = commit(work, f"{branch}.txt")
    git(work, "push", "-q", "origin", branch)
    forge.add_pull("acme", "widgets", number, head_ref=branch, head_sha=head, base_ref="main")
    return head


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    path = tmp_path / "widgets.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(path))
    return path


@pytest.fixture
def work(tmp_path: Path, bare: Path) -> Path:
    path = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(bare), str(path))
    git(path, "checkout", "-q", "-b", "main")
    commit(path, "README")
    git(path, "push", "-q", "origin", "main")
    return path


@pytest.fixture
def forge(bare: Path) -> Iterator[ForgeStandin]:
    with ForgeStandin(token=TOKEN, bare_repo=bare) as standin:
        yield standin


@pytest.fixture
def gh(forge: ForgeStandin) -> Iterator[GitHubClient]:
    client = GitHubClient(TOKEN, base_url=forge.url, timeout=5)
    yield client
    client.close()


@pytest.fixture
def gitea(forge: ForgeStandin) -> Iterator[GiteaClient]:
    client = GiteaClient(TOKEN, base_url=forge.url, timeout=5)
    yield client
    client.close()


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def post(state: str = "success", description: str = "landed", **kw: Any) -> StatusPost:
    return StatusPost(
        sha=kw.pop("sha", SHA),
        state=state,
        description=description,
        target_url=kw.pop("target_url", "https://mergebot.example/c/1"),
        **kw,
    )


def raw(forge: ForgeStandin, method: str, path: str, body: Any = None, token: str = TOKEN) -> httpx.Response:
    headers = {"Authorization": f"token {token}", "Accept": "application/vnd.github+json"}
    return httpx.request(method, forge.url + path, json=body, headers=headers, timeout=5)


# ------------------------------------------------------------------------------------- the stand-in itself


def test_subset_is_small_self_contained_and_from_octokit() -> None:
    assert SUBSET_PATH.stat().st_size < 1_000_000
    subset = github_subset()
    assert subset["source"]["package"] == "@octokit/openapi"
    assert subset["source"]["version"]
    text = json.dumps(subset)
    for ref in {r for r in text.split('"$ref": "')[1:]}:
        _, kind, name = ref.split('"', 1)[0].removeprefix("#/").split("/")
        assert name in subset["components"][kind], ref
    for path, method in [
        (REPO, "get"),
        (CREATE_STATUS, "post"),
        (LIST_STATUSES, "get"),
        (COMBINED_STATUS, "get"),
        (PULL, "get"),
    ]:
        assert method in subset["paths"][path]


def test_github_responses_validate_against_published_schemas(forge: ForgeStandin, work: Path) -> None:
    head = commit(work, "feature.txt")
    forge.add_pull("acme", "widgets", 7, head_ref="feature", head_sha=head, base_ref="main")
    base = f"/repos/{REPO_NAME}"

    r = raw(forge, "GET", base)
    assert r.status_code == 200
    validate_github_response(REPO, "get", 200, r.json())
    assert r.json()["full_name"] == REPO_NAME and r.json()["default_branch"] == "main"

    for i, (state, ctx) in enumerate([("pending", "mergebot"), ("success", "ci"), ("failure", "mergebot")]):
        r = raw(
            forge,
            "POST",
            f"{base}/statuses/{head}",
            {"state": state, "description": f"d{i}", "target_url": None, "context": ctx},
        )
        assert r.status_code == 201
        validate_github_response(CREATE_STATUS, "post", 201, r.json())
        assert r.headers["location"] == r.json()["url"]
        assert r.json()["creator"]["login"] == forge.login

    r = raw(forge, "GET", f"{base}/commits/{head}/statuses")
    validate_github_response(LIST_STATUSES, "get", 200, r.json())
    assert [s["state"] for s in r.json()] == ["failure", "success", "pending"]  # newest first

    r = raw(forge, "GET", f"{base}/commits/{head}/status")
    validate_github_response(COMBINED_STATUS, "get", 200, r.json())
    combined = r.json()
    assert combined["state"] == "failure" and combined["total_count"] == 2 and combined["sha"] == head
    assert {s["context"]: s["state"] for s in combined["statuses"]} == {"mergebot": "failure", "ci": "success"}

    r = raw(forge, "GET", f"{base}/commits/{SHA}/status")
    validate_github_response(COMBINED_STATUS, "get", 200, r.json())
    assert r.json()["state"] == "pending" and r.json()["statuses"] == []

    r = raw(forge, "GET", f"{base}/pulls/7")
    validate_github_response(PULL, "get", 200, r.json())
    pr = r.json()
    assert (pr["number"], pr["state"], pr["merged"], pr["merged_at"]) == (7, "open", False, None)
    assert (pr["head"]["ref"], pr["head"]["sha"], pr["base"]["ref"]) == ("feature", head, "main")

    git(work, "push", "-q", "origin", "HEAD:main")
    r = raw(forge, "GET", f"{base}/pulls/7")
    validate_github_response(PULL, "get", 200, r.json())
    assert (r.json()["state"], r.json()["merged"]) == ("closed", True)
    assert r.json()["merged_at"] is not None and r.json()["base"]["sha"] == head

    # Error bodies have GitHub's shapes too.
    r = raw(forge, "GET", base, token="wrong")
    assert r.status_code == 401 and r.json()["message"] == "Bad credentials"
    validate_github_error(401, r.json())
    r = raw(forge, "POST", f"{base}/statuses/{head}", {"state": "done"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "state"
    validate_github_error(422, r.json())
    r = raw(forge, "GET", f"{base}/pulls/99")
    assert r.status_code == 404
    validate_github_error(404, r.json())


def test_standin_accepts_bearer_and_records_requests(forge: ForgeStandin) -> None:
    r = httpx.get(f"{forge.url}/repos/{REPO_NAME}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    assert httpx.get(f"{forge.url}/repos/{REPO_NAME}").status_code == 401
    forge.fail_next(1, 503)
    assert raw(forge, "GET", f"/repos/{REPO_NAME}").status_code == 503
    assert [(q.method, q.status) for q in forge.requests] == [("GET", 200), ("GET", 401), ("GET", 503)]
    assert forge.requests[0].headers["authorization"] == f"Bearer {TOKEN}"


# ------------------------------------------------------------------------------------------- GitHubClient


def test_github_post_status_makes_one_request(forge: ForgeStandin, gh: GitHubClient) -> None:
    gh.post_status(REPO_NAME, post("pending", "queued behind 2", context="mergebot/land"))
    [status] = forge.statuses(SHA)
    assert (status.forge, status.owner, status.repo) == ("github", "acme", "widgets")
    assert (status.state, status.description, status.context) == ("pending", "queued behind 2", "mergebot/land")
    assert status.target_url == "https://mergebot.example/c/1"
    [request] = forge.requests
    assert (request.method, request.path, request.status) == ("POST", f"/repos/{REPO_NAME}/statuses/{SHA}", 201)
    assert request.headers["authorization"] in (f"token {TOKEN}", f"Bearer {TOKEN}")
    assert request.json == {
        "state": "pending",
        "description": "queued behind 2",
        "context": "mergebot/land",
        "target_url": "https://mergebot.example/c/1",
    }

    gh.post_status(REPO_NAME, post("success", "x" * 300, target_url=None))
    assert len(forge.requests) == 2
    latest = forge.statuses(SHA)[-1]
    assert latest.context == "mergebot" and latest.target_url is None
    assert latest.description is not None and len(latest.description) == 140 and latest.description.endswith("…")
    assert "target_url" not in forge.requests[-1].json


def test_github_bad_token_is_not_retryable(forge: ForgeStandin) -> None:
    client = GitHubClient("wrong", base_url=forge.url)
    sleeps = Sleeps()
    with pytest.raises(ForgeCallError) as info:
        post_with_retry(client, REPO_NAME, post(), sleep=sleeps)
    assert (info.value.retryable, info.value.status) == (False, 401)
    assert "Bad credentials" in str(info.value)
    assert len(forge.requests) == 1 and sleeps.delays == []
    assert forge.statuses(SHA) == []


def test_github_retries_through_502s(forge: ForgeStandin, gh: GitHubClient) -> None:
    forge.fail_next(2, 502)
    sleeps = Sleeps()
    post_with_retry(gh, REPO_NAME, post(), base_delay=0.1, sleep=sleeps)
    assert [r.status for r in forge.requests] == [502, 502, 201]
    assert len(forge.statuses(SHA)) == 1
    assert len(sleeps.delays) == 2 and 0 < sleeps.delays[0] < sleeps.delays[1] <= 0.2


def test_github_gives_up_after_attempts(forge: ForgeStandin, gh: GitHubClient) -> None:
    forge.fail_next(10, 502)
    sleeps = Sleeps()
    with pytest.raises(ForgeCallError) as info:
        post_with_retry(gh, REPO_NAME, post(), attempts=4, base_delay=0.01, sleep=sleeps)
    assert (info.value.retryable, info.value.status) == (True, 502)
    assert len(forge.requests) == 4 and len(sleeps.delays) == 3
    assert sleeps.delays == sorted(sleeps.delays)
    assert forge.statuses(SHA) == []


def test_github_bad_state_is_not_retried(forge: ForgeStandin, gh: GitHubClient) -> None:
    sleeps = Sleeps()
    with pytest.raises(ForgeCallError) as info:
        post_with_retry(gh, REPO_NAME, post("done"), sleep=sleeps)
    assert (info.value.retryable, info.value.status) == (False, 422)
    assert len(forge.requests) == 1 and sleeps.delays == []


def test_github_429_is_retryable(forge: ForgeStandin, gh: GitHubClient) -> None:
    forge.fail_next(1, 429)
    sleeps = Sleeps()
    post_with_retry(gh, REPO_NAME, post(), base_delay=0.01, sleep=sleeps)
    assert [r.status for r in forge.requests] == [429, 201]


# PyGithub takes whole seconds, so GitHub's shortest timeout is 1 s: the stall must outlast it.
@pytest.mark.parametrize(("client", "stall", "timeout"), [(GitHubClient, 1.1, 0.5), (GiteaClient, 0.3, 0.1)],
                         ids=["github", "gitea"])
def test_unreachable_and_timeouts_are_retryable(
    forge: ForgeStandin, client: type[GitHubClient] | type[GiteaClient], stall: float, timeout: float
) -> None:
    with pytest.raises(ForgeCallError) as info:
        client(TOKEN, base_url=f"http://127.0.0.1:{free_port()}").post_status(REPO_NAME, post())
    assert info.value.retryable and info.value.status is None

    forge.stall_next(1, stall)
    with pytest.raises(ForgeCallError) as info:
        client(TOKEN, base_url=forge.url, timeout=timeout).post_status(REPO_NAME, post())
    assert info.value.retryable and info.value.status is None


def test_github_pull_merged_follows_the_bare_repo(forge: ForgeStandin, gh: GitHubClient, work: Path) -> None:
    open_pull(forge, work, 12, "feature")
    assert gh.pull_merged(REPO_NAME, 12) is False
    # Someone else lands on main meanwhile: still not merged.
    git(work, "checkout", "-q", "main")
    commit(work, "other.txt")
    git(work, "push", "-q", "origin", "main")
    assert gh.pull_merged(REPO_NAME, 12) is False
    # The head commit reaches main (here: main merged with feature and pushed): merged.
    git(work, "merge", "-q", "--no-edit", "feature")
    git(work, "push", "-q", "origin", "main")
    assert gh.pull_merged(REPO_NAME, 12) is True
    assert [(r.method, r.path) for r in forge.requests] == [("GET", f"/repos/{REPO_NAME}/pulls/12")] * 3

    with pytest.raises(ForgeCallError) as info:
        gh.pull_merged(REPO_NAME, 404)
    assert (info.value.retryable, info.value.status) == (False, 404)


# -------------------------------------------------------------------------------------------- GiteaClient


def test_gitea_post_status(forge: ForgeStandin, gitea: GiteaClient) -> None:
    gitea.post_status(REPO_NAME, post("failure", "verifier failed", context="mergebot/land"))
    [status] = forge.statuses(SHA)
    assert (status.forge, status.state, status.description, status.context) == (
        "gitea",
        "failure",
        "verifier failed",
        "mergebot/land",
    )
    assert status.target_url == "https://mergebot.example/c/1"
    [request] = forge.requests
    assert (request.method, request.path, request.status) == ("POST", f"/api/v1/repos/{REPO_NAME}/statuses/{SHA}", 201)
    assert request.headers["authorization"] == f"token {TOKEN}"
    assert request.json == {
        "state": "failure",
        "description": "verifier failed",
        "context": "mergebot/land",
        "target_url": "https://mergebot.example/c/1",
    }

    gitea.post_status(REPO_NAME, post("success", "landed", target_url=None))
    r = httpx.get(f"{forge.url}/api/v1/repos/{REPO_NAME}/statuses/{SHA}", headers={"Authorization": f"token {TOKEN}"})
    assert r.status_code == 200
    listed = r.json()
    for item in listed:
        validate_gitea("CommitStatus", item)
    assert [(s["status"], s["context"]) for s in listed] == [("success", "mergebot"), ("failure", "mergebot/land")]
    assert listed[0]["target_url"] == "" and "target_url" not in forge.requests[1].json


def test_gitea_errors_and_retries(forge: ForgeStandin, gitea: GiteaClient) -> None:
    bad = GiteaClient("wrong", base_url=forge.url + "/api/v1/")
    with pytest.raises(ForgeCallError) as info:
        post_with_retry(bad, REPO_NAME, post(), sleep=Sleeps())
    assert (info.value.retryable, info.value.status) == (False, 401)
    bad.close()
    r = httpx.get(f"{forge.url}/api/v1/repos/{REPO_NAME}/statuses/{SHA}", headers={"Authorization": "token wrong"})
    assert r.status_code == 401
    validate_gitea("APIError", r.json())

    with pytest.raises(ForgeCallError) as info:
        post_with_retry(gitea, REPO_NAME, post("done"), sleep=Sleeps())
    assert (info.value.retryable, info.value.status) == (False, 422)
    gitea.post_status(REPO_NAME, post("warning", "flaky"))  # Gitea knows a fifth state
    assert [s.state for s in forge.statuses(SHA)] == ["warning"]

    forge.fail_next(2, 502)
    sleeps = Sleeps()
    post_with_retry(gitea, REPO_NAME, post(), base_delay=0.1, sleep=sleeps)
    assert [r.status for r in forge.requests][-3:] == [502, 502, 201]
    assert 0 < sleeps.delays[0] < sleeps.delays[1]

    forge.fail_next(10, 502)
    with pytest.raises(ForgeCallError) as info:
        post_with_retry(gitea, REPO_NAME, post(), attempts=3, base_delay=0.01, sleep=Sleeps())
    assert (info.value.retryable, info.value.status) == (True, 502)
    assert [r.status for r in forge.requests][-3:] == [502, 502, 502]


def test_gitea_pull_merged(forge: ForgeStandin, gitea: GiteaClient, work: Path) -> None:
    head = open_pull(forge, work, 3, "topic")
    assert gitea.pull_merged(REPO_NAME, 3) is False
    git(work, "push", "-q", "origin", "topic:main")  # fast-forward: the head sha is main's tip
    assert gitea.pull_merged(REPO_NAME, 3) is True
    r = httpx.get(f"{forge.url}/api/v1/repos/{REPO_NAME}/pulls/3", headers={"Authorization": f"token {TOKEN}"})
    validate_gitea("PullRequest", r.json())
    assert (r.json()["state"], r.json()["merged"], r.json()["head"]["sha"]) == ("closed", True, head)
    with pytest.raises(ForgeCallError) as info:
        gitea.pull_merged(REPO_NAME, 4)
    assert (info.value.retryable, info.value.status) == (False, 404)


# --------------------------------------------------------------------------------- client_for, retry policy


def test_client_for() -> None:
    assert isinstance(client_for("github", token="t", base_url=None), GitHubClient)
    assert isinstance(client_for("github", token="t", base_url="https://ghe.example/api/v3"), GitHubClient)
    assert isinstance(client_for("gitea", token="t", base_url="http://gitea:3000"), GiteaClient)
    assert isinstance(client_for("forgejo", token="t", base_url="http://forgejo:3000"), GiteaClient)
    with pytest.raises(ValueError):
        client_for("gitea", token="t", base_url=None)
    with pytest.raises(ValueError):
        client_for("gitlab", token="t", base_url="https://gitlab.example")


class Flaky:
    def __init__(self, errors: list[ForgeCallError]) -> None:
        self.errors = errors
        self.calls = 0

    def post_status(self, repo: str, post: StatusPost) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)

    def pull_merged(self, repo: str, number: int) -> bool:
        return False


def test_post_with_retry_policy() -> None:
    client: ForgeClient = Flaky([ForgeCallError("slow down", retryable=True, status=429, retry_after=3.0)])
    sleeps = Sleeps()
    post_with_retry(client, REPO_NAME, post(), base_delay=0.01, sleep=sleeps)
    assert sleeps.delays == [3.0]

    flaky = Flaky([ForgeCallError("boom", retryable=True)] * 6)
    sleeps = Sleeps()
    with pytest.raises(ForgeCallError):
        post_with_retry(flaky, REPO_NAME, post(), attempts=5, base_delay=1.0, sleep=sleeps)
    assert flaky.calls == 5
    for n, delay in enumerate(sleeps.delays):
        assert 2**n / 2 <= delay <= 2**n
    with pytest.raises(ValueError):
        post_with_retry(Flaky([]), REPO_NAME, post(), attempts=0)
