"""Hostile input, generated, for what git and its hooks send: the subtask-ref grammar, the push judge
(``judge_ref``/``judge_content``/``is_protected``), the hooks' ``old new ref`` lines (``parse_updates`` and the
``/internal/hooks`` endpoints), and the smart-HTTP front door (paths, ``service=``, Basic credentials, the CGI's
header block).

Push options (``git push -o``) are not read anywhere in Mergebot: the bare repositories do not advertise them
(``receive.advertisePushOptions`` is unset), so there is no parser to fuzz; ``tests/test_security_inputs.py``
checks that a push with ``-o`` is refused by git before anything runs.
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import json
import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.types import Message

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.git import cgi, smarthttp
from mergebot.git.smarthttp import GitHttp, PushSession
from mergebot.landing.intake import checks
from mergebot.landing.intake.prereceive import parse_updates
from mergebot.models import Agent, Owner
from mergebot.rules import Rules
from tests.support.fuzzing import FAST, HTTP, SHA, ZERO

# ============================================================================================ git refs

REF_PARTS = st.sampled_from(["refs", "heads", "subtasks", "tags", "main", "v1", "v0", "1", "01", "-1", "v", "",
                             "..", "$(x)", "notes", "v99999999999999999999", "\n", "5"])
REFS = st.one_of(
    st.text(max_size=60),
    st.lists(REF_PARTS | st.text(max_size=4), min_size=1, max_size=7).map("/".join),
    st.builds(lambda i, v, pre, post: f"{pre}refs/heads/subtasks/{i}/v{v}{post}", st.integers(-3, 10**19),
              st.integers(-3, 10**19), st.sampled_from(["", " ", "x", "/"]),
              st.sampled_from(["", "\n", "/", " ", "x", "/x", "\x00"])),
)


@FAST
@given(ref=REFS)
def test_subtask_ref_grammar_is_exact(ref: str) -> None:
    parsed = checks.parse_subtask_ref(ref)
    if parsed is not None:
        subtask_id, version = parsed
        assert subtask_id >= 1 and version >= 1
        assert ref == f"refs/heads/subtasks/{subtask_id}/v{version}"  # canonical: nothing before, after or inside


@FAST
@given(subtask_id=st.integers(1, 10**17), version=st.integers(1, 10**17))
def test_every_claim_branch_parses_back(subtask_id: int, version: int) -> None:
    assert checks.parse_subtask_ref(f"refs/heads/subtasks/{subtask_id}/v{version}") == (subtask_id, version)


OWNERS = st.none() | st.builds(Owner, subtask_id=st.integers(1, 9), status=st.sampled_from(
    ["blocked", "ready", "running", "submitted", "landed", "failed", "cancelled"]),
    owner_id=st.none() | st.integers(1, 3), claim_version=st.integers(1, 4), landing=st.booleans())


@FAST
@given(ref=REFS | st.builds(lambda i, v: f"refs/heads/subtasks/{i}/v{v}", st.integers(1, 9), st.integers(1, 5)),
       new=SHA | st.just(ZERO), pusher=st.integers(1, 3), target=st.sampled_from(["main", "trunk"]), row=OWNERS)
def test_judge_ref_accepts_only_the_owner_at_the_current_claim(ref: str, new: str, pusher: int, target: str,
                                                               row: Owner | None) -> None:
    update = checks.RefUpdate(ZERO, new, ref)
    refusal = checks.judge_ref(update, pusher, target, row)
    parsed = checks.parse_subtask_ref(ref)
    if refusal is not None:
        assert refusal.ref == ref and refusal.code and refusal.message
        return
    # Accepted: a subtask branch of an existing subtask the pusher owns...
    assert parsed is not None and row is not None and row.owner_id == pusher and ref != f"refs/heads/{target}"
    if not update.deletion:  # ...at its current claim version, running or submitted, not landing right now
        assert parsed[1] == row.claim_version and row.status in ("running", "submitted") and not row.landing


PATHS = st.lists(st.sampled_from(["ci", "src", "a", "ci.yml", "pyproject.toml", "x*", "[ab]", ".."]) |
                 st.text(alphabet="abc/.*?[]", min_size=1, max_size=5), min_size=1, max_size=4).map("/".join)
PATTERNS = st.lists(st.sampled_from(["ci/", "pyproject.toml", "*.lock", "docs/*", "a/"]) | PATHS, max_size=4)


@FAST
@given(path=PATHS, patterns=PATTERNS)
def test_protected_paths_cover_their_folders_and_matches(path: str, patterns: list[str]) -> None:
    protected = checks.is_protected(path, patterns)
    for p in patterns:
        if path == p or path.startswith(p.rstrip("/") + "/"):  # the path itself, or under it
            assert protected
    if not patterns:
        assert not protected
    if protected:
        assert any(path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") or fnmatch.fnmatchcase(path, p)
                   for p in patterns)


@FAST
@given(paths=st.lists(PATHS, max_size=6), patterns=PATTERNS, commits=st.integers(0, 2000),
       push_bytes=st.integers(0, 10**9), largest=st.integers(0, 10**9), roots=st.lists(SHA, max_size=2),
       on_target=st.booleans())
def test_judge_content_refuses_any_protected_path(paths: list[str], patterns: list[str], commits: int,
                                                  push_bytes: int, largest: int, roots: list[str],
                                                  on_target: bool) -> None:
    content = checks.Content(changed_paths=paths, commit_count=commits, roots=roots, foreign=[],
                             largest_file=("f", largest), push_bytes=push_bytes, already_on_target=on_target)
    limits = checks.Limits(protected_paths=patterns, max_file_bytes=10**6, max_push_bytes=10**8)
    update = checks.RefUpdate(ZERO, "a" * 40, "refs/heads/subtasks/1/v1")
    refusal = checks.judge_content(update, "main", content, limits)
    if any(checks.is_protected(p, patterns) for p in paths):
        assert refusal is not None
    if refusal is None:
        assert not any(checks.is_protected(p, patterns) for p in paths) and not roots and not on_target
        assert push_bytes <= limits.max_push_bytes and largest <= limits.max_file_bytes and commits <= 1000


# ============================================================================================ hook input

LINE = st.one_of(
    st.lists(st.text(max_size=70), max_size=5),
    st.tuples(SHA | st.text(max_size=42), SHA | st.just(ZERO), REFS).map(list),
)


@FAST
@given(lines=st.lists(LINE, max_size=5))
def test_parse_updates_yields_only_well_formed_updates(lines: list[list[str]]) -> None:
    try:
        updates = parse_updates(lines)
    except ValueError:
        return
    assert len(updates) == len(lines)
    for u in updates:
        for sha in (u.old, u.new):
            assert re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha)
        assert u.ref.startswith("refs/") and len(u.ref) <= 1024 and not any(ord(c) < 32 for c in u.ref)


HOOK_BODY = st.one_of(
    st.binary(max_size=400),
    st.lists(st.tuples(SHA | st.text(max_size=42), SHA | st.just(ZERO), REFS).map(" ".join), max_size=6).map(
        lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
)


async def test_hook_endpoints_take_any_body_without_a_5xx(db: Database, app_client: TestClient) -> None:
    await db.repos.create_repo(name="demo", root_sha=ZERO, rules=Rules.of(target_branch="main", verifier_command="true",
                               verifier_timeout_s=60, protected_paths=["ci/"], max_push_bytes=1 << 20,
                               max_file_bytes=1 << 20))
    agent, _ = await db.agents.add_agent(name="ann", role=Role.AGENT)
    client = app_client
    git_app: GitHttp = client.app.state.services.git  # type: ignore[attr-defined]
    git_app.sessions["fuzz-push"] = PushSession(push_id="fuzz-push", repo="demo", agent=agent)
    seen: set[int] = set()

    @HTTP
    @given(stage=st.sampled_from(["pre-receive", "post-receive"]), body=HOOK_BODY,
           push_id=st.sampled_from(["fuzz-push", "", "other"]) | st.text(alphabet="abcXYZ-_0", max_size=30),
           quarantine=st.none() | st.text(alphabet="abc/._-incoming0", max_size=40))
    # Once a 422 with the database's foreign-key text: a push naming a subtask that does not exist.
    @example(stage="pre-receive", body=f"{ZERO} {'a' * 40} refs/heads/subtasks/999/v1".encode(),
             push_id="fuzz-push", quarantine=None)
    def hooks(stage: str, body: bytes, push_id: str, quarantine: str | None) -> None:
        headers = {"x-mergebot-push-id": push_id, "content-type": "text/plain"}
        if quarantine is not None:
            headers["x-mergebot-quarantine"] = quarantine
        r = client.post(f"/internal/hooks/{stage}", content=body, headers=headers)
        seen.add(r.status_code)
        assert r.status_code < 500, r.text
        if push_id != "fuzz-push":
            assert r.status_code == 403 and "unknown push" in r.text
        elif stage == "pre-receive" and body.decode("utf-8", "replace").strip():
            # the agent owns nothing: a push is refused with reasons, or malformed; never accepted
            assert r.status_code in (400, 403), r.text

    hooks()
    assert 403 in seen
    # The case that once was a 500: a post-receive body that is not "old new ref" lines.
    r = client.post("/internal/hooks/post-receive", content=b"\x00", headers={"x-mergebot-push-id": "fuzz-push"})
    assert r.status_code == 400 and "malformed push" in r.text
    assert await db.landing.candidates(repo="demo") == []  # nothing was queued by any of it


# ============================================================================================ smart HTTP

PATH_SEGMENTS = st.sampled_from(["demo.git", "info", "refs", "git-upload-pack", "git-receive-pack", "..", ".",
                                 "", "%2e%2e", "demo", "x.git", "HEAD", "objects", "demo\n.git", "..git",
                                 "-x.git", "a b.git"])
GIT_PATHS = st.one_of(st.text(max_size=40),
                      st.lists(PATH_SEGMENTS | st.text(max_size=6), max_size=5).map(lambda p: "/" + "/".join(p)))


@FAST
@given(path=GIT_PATHS)
def test_git_paths_name_only_plain_repositories(path: str) -> None:
    route = smarthttp._parse_path(path)
    if route is None:
        return
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", route.name)
    assert ".." not in route.name and "/" not in route.name
    assert path == f"/{route.name}.git/{route.rest}"
    assert route.rest in ("info/refs", "git-upload-pack", "git-receive-pack")
    assert route.push == (route.rest == "git-receive-pack")


@FAST
@given(query=st.text(max_size=60) | st.lists(st.sampled_from(
    ["service=git-upload-pack", "service=git-receive-pack", "service=", "service=x", "x=1", "&", "service"]),
    max_size=3).map("&".join))
def test_service_is_one_of_two_or_none(query: str) -> None:
    service = smarthttp._service({"query_string": query.encode("utf-8", "surrogatepass")})
    assert service in (None, "git-upload-pack", "git-receive-pack")


@FAST
@given(block=st.binary(max_size=300) | st.lists(st.sampled_from(
    [b"Status: 200 OK", b"Status: 999", b"Status: x", b"Status:", b"Location: /x", b"Content-Type: a/b",
     b"X: a\rb", b"Expires: Fri", b"no colon", b": empty name", b"\r"]), max_size=5).map(b"\r\n".join))
def test_cgi_header_block_parses_to_a_valid_status_and_single_line_headers(block: bytes) -> None:
    status, headers = cgi.parse_cgi_headers(block)
    assert 100 <= status <= 599
    for name, value in headers:
        assert b"\n" not in name and b"\n" not in value and name == name.lower()


TOKEN = "mb_fuzz-token-000000000000000000000"


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


AUTHZ = st.one_of(
    st.none(),
    st.text(max_size=60),
    st.builds(_basic, st.text(max_size=10).filter(lambda u: ":" not in u), st.sampled_from([TOKEN, "", "nope"])),
    st.builds(lambda s: "Basic " + s, st.text(alphabet="ABCabc=+/:0", max_size=30)),
    st.just("Bearer " + TOKEN),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(method=st.sampled_from(["GET", "POST", "PUT", "HEAD", "DELETE"]), path=GIT_PATHS,
       query=st.sampled_from(["", "service=git-upload-pack", "service=git-receive-pack", "service=x"]),
       authz=AUTHZ, length=st.none() | st.sampled_from(["0", "-1", "x", "99999999999", "10"]),
       role=st.sampled_from(["agent", "reviewer"]))
def test_git_front_door_answers_only_authenticated_smart_requests(method: str, path: str, query: str,
                                                                   authz: str | None, length: str | None,
                                                                   role: str) -> None:
    """The ASGI app before the CGI: whatever arrives, the CGI runs only for an authenticated caller, an existing
    repository, a smart-protocol endpoint, and a push only for a role that may push."""
    agent = Agent(id=1, name="ann", role=role)
    passwords: list[str] = []

    async def authenticate(password: str) -> Agent | None:
        passwords.append(password)
        return agent if password == TOKEN else None

    app = GitHttp(Path("/nonexistent-root"), authenticate=authenticate, may_push=lambda a: a.role == "agent",
                  repo_exists=lambda name: name == "demo", hook_url=lambda: "http://127.0.0.1:1/internal/hooks",
                  max_body_bytes=1000)
    ran: list[Any] = []

    async def fake_cgi(env: dict[str, str], route: Any, receive: Any, send: Any, session: Any) -> None:
        ran.append((env, route, session))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    app._run_cgi = fake_cgi  # type: ignore[method-assign]
    headers = [(b"authorization", authz.encode("utf-8", "surrogatepass"))] if authz is not None else []
    if length is not None:
        headers.append((b"content-length", length.encode()))
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": headers,
             "query_string": query.encode(), "http_version": "1.1", "client": ("127.0.0.1", 5)}
    asyncio.run(app(scope, receive, send))
    status = sent[0]["status"]
    assert status in (200, 400, 401, 403, 404, 405, 413), status
    assert all(passwords)  # an empty password is never looked up
    if not ran:
        return
    env, route, session = ran[0]
    assert route.name == "demo" and passwords and passwords[-1] == TOKEN
    assert "HTTP_AUTHORIZATION" not in env and TOKEN not in json.dumps(env)  # the credential never reaches git
    assert env["REMOTE_USER"] == "ann"
    if route.push:
        assert role == "agent"
        if route.rest == "git-receive-pack":
            assert session is not None and session.agent is agent and env["MERGEBOT_PUSH_ID"] == session.push_id


# ============================================================================================ the JSON API
