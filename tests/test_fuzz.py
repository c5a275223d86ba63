"""Hostile input, generated: property-based tests of every parser that reads what an agent, a forge or git sends.

  * Webhooks: ``tests/test_webhook_parser.py`` covers signed JSON objects and mutated recorded payloads; here
    arbitrary bytes, arbitrary headers and arbitrary signatures, the JSON parser on any text, and the HTTP
    endpoints on a real database (a malformed delivery is a 4xx and changes nothing).
  * Git refs and pushes: the subtask-ref grammar, the push judge (``judge_ref``/``judge_content``/``is_protected``),
    the hooks' ``old new ref`` lines (``parse_updates`` and the ``/internal/hooks`` endpoints), and the smart-HTTP
    front door (paths, ``service=``, Basic credentials, the CGI's header block).
    Push options (``git push -o``) are not read anywhere in Mergebot: the bare repositories do not advertise
    them (``receive.advertisePushOptions`` is unset), so there is no parser to fuzz; ``tests/test_security.py``
    checks that a push with ``-o`` is refused by git before anything runs.
  * The JSON API: schemathesis against ``/openapi.json`` of a real ``mergebot serve`` on a real PostgreSQL, as an
    admin, an agent, a reviewer and nobody: no 5xx, every status and body as documented, and every secured
    operation answers 401 without a token.

Example counts are small and fixed (no shrinking past a first failure in the API run) so the file stays fast.
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import hashlib
import hmac
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st
from starlette.types import Message

from mergebot.api import create_app
from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.forge.sansio import (
    MAX_DEPTH,
    WebhookError,
    parse_delivery,
    parse_json,
    to_event,
    verify_signature,
)
from mergebot.git import cgi, smarthttp
from mergebot.git.smarthttp import GitHttp, PushSession
from mergebot.landing.checks import (
    Content,
    Limits,
    RefUpdate,
    is_protected,
    judge_content,
    judge_ref,
    parse_subtask_ref,
)
from mergebot.landing.prereceive import parse_updates
from mergebot.models import Agent, Owner
from mergebot.settings import Settings
from tests.support.bot import BotProcess

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HTTP = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SECRET = b"whsec-fuzz-3Jk9"
SECRET_ENV = "MB_FUZZ_WEBHOOK_SECRET"
SHA = st.text(alphabet="0123456789abcdef", min_size=40, max_size=40)
ZERO = "0" * 40


def sign(body: bytes, secret: bytes = SECRET) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


# ============================================================================================ webhooks, sans I/O

FORGE_HEADER_NAMES = st.sampled_from([
    "x-github-event", "x-github-delivery", "x-hub-signature-256", "x-hub-signature", "x-gitea-event",
    "x-gitea-delivery", "x-gitea-signature", "x-forgejo-event", "x-forgejo-delivery", "x-forgejo-signature",
    "x-gogs-event", "content-type", "x-gitea-event-type", "x-forgejo-other",
])
HEADER_VALUES = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["push", "pull_request", "ping", "delete", "sha256=", "sha256=" + "0" * 64, "0" * 64, ""]),
    st.builds(lambda b: "sha256=" + sign(b), st.binary(max_size=20)),
)
HEADERS = st.lists(st.tuples(FORGE_HEADER_NAMES | st.text(max_size=20), HEADER_VALUES), max_size=12)
JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
JSON_ANY = st.recursive(JSON_SCALARS, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c,
                                                                                        max_size=4), max_leaves=12)


def _only_4xx(headers: list[tuple[str, str]], body: bytes, secrets: list[bytes]) -> Any:
    """parse_delivery + to_event either succeed or raise WebhookError with a 4xx status; nothing else."""
    try:
        return to_event(parse_delivery(headers, body, secrets))
    except WebhookError as e:
        assert 400 <= e.status < 500, e
        assert e.message
        return e


@FAST
@given(headers=HEADERS, body=st.binary(max_size=300))
def test_arbitrary_headers_and_bytes_are_refused_with_a_4xx(headers: list[tuple[str, str]], body: bytes) -> None:
    out = _only_4xx(headers, body, [SECRET])
    if not isinstance(out, WebhookError):  # accepted: then the signature really was ours
        assert any(v.removeprefix("sha256=").lower() == sign(body) for _, v in headers)


@FAST
@given(forge=st.sampled_from(["github", "gitea", "forgejo"]), extra=HEADERS, body=st.binary(max_size=300),
       event=st.text(max_size=30) | st.sampled_from(["push", "pull_request", "delete", "ping"]),
       delivery=st.text(max_size=40) | st.uuids().map(str))
def test_signed_arbitrary_bytes_are_refused_with_a_4xx(forge: str, extra: list[tuple[str, str]], body: bytes,
                                                       event: str, delivery: str) -> None:
    sig = sign(body)
    own = {"github": [("x-github-event", event), ("x-github-delivery", delivery),
                      ("x-hub-signature-256", "sha256=" + sig)],
           "gitea": [("x-gitea-event", event), ("x-gitea-delivery", delivery), ("x-gitea-signature", sig)],
           "forgejo": [("x-forgejo-event", event), ("x-forgejo-delivery", delivery), ("x-forgejo-signature", sig)],
           }[forge]
    _only_4xx(own + extra, body, [SECRET])


@FAST
@given(value=JSON_ANY, event=st.sampled_from(["push", "pull_request", "delete", "ping", "create"]))
def test_signed_arbitrary_json_is_an_event_or_a_400(value: Any, event: str) -> None:
    body = json.dumps(value).encode()
    headers = [("x-github-event", event), ("x-github-delivery", "d-1"), ("x-hub-signature-256", "sha256=" + sign(body))]
    out = _only_4xx(headers, body, [SECRET])
    if not isinstance(value, dict):
        assert isinstance(out, WebhookError) and out.status == 400


@FAST
@given(secrets=st.lists(st.binary(max_size=12), max_size=4), key=st.binary(min_size=1, max_size=12),
       body=st.binary(max_size=200), forge=st.sampled_from(["github", "gitea", "forgejo"]),
       flip=st.integers(min_value=0, max_value=199))
def test_a_signature_verifies_only_with_a_configured_secret(secrets: list[bytes], key: bytes, body: bytes, forge: str,
                                                            flip: int) -> None:
    sig = sign(body, key)
    headers = ([("x-hub-signature-256", "sha256=" + sig)] if forge == "github"
               else [(f"x-{forge}-signature", sig)])
    usable = [i for i, s in enumerate(secrets) if s]
    try:
        index = verify_signature(forge, headers, body, secrets)
    except WebhookError as e:
        assert e.status == 401
        assert key not in [secrets[i] for i in usable]
    else:
        assert secrets[index] == key and index == min(i for i in usable if secrets[i] == key)
    if body:  # one flipped byte of the body: no configured secret matches any more (unless it collides: never)
        i = flip % len(body)
        tampered = body[:i] + bytes([body[i] ^ 1]) + body[i + 1:]
        with pytest.raises(WebhookError) as info:
            verify_signature(forge, headers, tampered, [key])
        assert info.value.status == 401


@FAST
@given(sig=st.text(max_size=80), forge=st.sampled_from(["github", "gitea", "forgejo"]), body=st.binary(max_size=50))
def test_forged_signature_headers_are_401(sig: str, forge: str, body: bytes) -> None:
    assume(sig.removeprefix("sha256=").lower() != sign(body))
    name = "x-hub-signature-256" if forge == "github" else f"x-{forge}-signature"
    with pytest.raises(WebhookError) as info:
        verify_signature(forge, [(name, sig)], body, [SECRET])
    assert info.value.status == 401


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@FAST
@given(text=st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_parse_json_on_any_text_is_a_dict_or_a_400(text: str) -> None:
    for body in (text.encode("utf-8", "surrogatepass"), text.encode("latin-1", "replace")):
        try:
            out = parse_json(body)
        except WebhookError as e:
            assert e.status == 400
        else:
            assert isinstance(out, dict)


@FAST
@given(value=st.dictionaries(st.text(max_size=8), JSON_ANY, max_size=5))
def test_parse_json_round_trips_ordinary_objects(value: dict[str, Any]) -> None:
    body = json.dumps(value).encode()
    if _depth(value) <= MAX_DEPTH:
        assert parse_json(body) == value


# ============================================================================================ webhooks over HTTP

async def _counts(db: Database) -> dict[str, int]:
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace")
        names = [r[0] for r in await cur.fetchall()]
        out = {}
        for name in names:
            cur = await conn.execute(f'SELECT count(*) FROM "{name}"')  # names from the catalogue
            row = await cur.fetchone()
            assert row is not None
            out[name] = int(row[0])
        return out


@pytest.fixture
def webhook_app(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv(SECRET_ENV, SECRET.decode())
    with TestClient(create_app(settings, run_recovery=False, run_queue=False)) as client:
        yield client


async def test_malformed_webhooks_over_http_are_4xx_and_change_nothing(db: Database,
                                                                       webhook_app: TestClient) -> None:
    for forge, repo in (("github", "acme/app"), ("gitea", "acme/lib")):
        await db.landing.create_repo(name=repo.split("/")[1], target_branch="main", verifier_command="true",
                                     verifier_timeout_s=60, protected_paths=[], max_push_bytes=1 << 20,
                                     max_file_bytes=1 << 20, root_sha=ZERO, forge={
                                    "forge": forge, "forge_repo": repo, "forge_api_url": "https://forge.invalid",
                                    "forge_git_url": f"https://forge.invalid/{repo}.git",
                                    "webhook_secret_env": SECRET_ENV, "forge_token_env": SECRET_ENV})
    before = await _counts(db)
    client = webhook_app
    statuses: list[int] = []

    @HTTP
    @given(endpoint=st.sampled_from(["github", "gitea"]), headers=HEADERS, body=st.binary(max_size=300))
    def unsigned(endpoint: str, headers: list[tuple[str, str]], body: bytes) -> None:
        clean = [(k, v) for k, v in headers if re.fullmatch(r"[a-z0-9-]+", k) and v.isascii() and v.isprintable()
                 and k not in ("content-length", "host", "transfer-encoding")]
        assume(not any(v.removeprefix("sha256=").lower() == sign(body) for _, v in clean))
        r = client.post(f"/webhooks/{endpoint}", content=body, headers=clean)
        statuses.append(r.status_code)
        assert 400 <= r.status_code < 500, r.text
        assert isinstance(r.json()["error"], str)

    unsigned()
    assert await _counts(db) == before  # nothing recorded for an unauthenticated or unreadable delivery

    @HTTP
    @given(endpoint=st.sampled_from(["github", "gitea"]), body=st.binary(max_size=300) | JSON_ANY.map(
        lambda v: json.dumps(v).encode()), event=st.sampled_from(["push", "pull_request", "delete", "ping"]))
    def signed(endpoint: str, body: bytes, event: str) -> None:
        n = len(statuses)  # a fresh delivery id each time (a reused id with another body is a logged 409)
        sig = sign(body)
        headers = ({"x-github-event": event, "x-github-delivery": f"fz-{n}", "x-hub-signature-256": f"sha256={sig}"}
                   if endpoint == "github" else
                   {"x-gitea-event": event, "x-gitea-delivery": f"fz-{n}", "x-gitea-signature": sig})
        r = client.post(f"/webhooks/{endpoint}", content=body, headers=headers)
        statuses.append(r.status_code)
        assert r.status_code < 500, r.text
        if r.status_code < 300:  # taken: a ping, or ignored (another repository, not a candidate)
            assert "outcome" in r.json() or r.json().get("duplicate") is True

    signed()
    after = await _counts(db)
    # Signed deliveries are recorded (so a redelivery is answered the same way) and nothing else changes:
    # no subtask, candidate, landed row or commit status comes out of a delivery that is not a real push.
    changed = {t for t in after if after[t] != before[t]}
    assert changed <= {"webhook_deliveries"}, changed
    assert any(400 <= s < 500 for s in statuses)


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
    parsed = parse_subtask_ref(ref)
    if parsed is not None:
        subtask_id, version = parsed
        assert subtask_id >= 1 and version >= 1
        assert ref == f"refs/heads/subtasks/{subtask_id}/v{version}"  # canonical: nothing before, after or inside


@FAST
@given(subtask_id=st.integers(1, 10**17), version=st.integers(1, 10**17))
def test_every_claim_branch_parses_back(subtask_id: int, version: int) -> None:
    assert parse_subtask_ref(f"refs/heads/subtasks/{subtask_id}/v{version}") == (subtask_id, version)


OWNERS = st.none() | st.builds(Owner, subtask_id=st.integers(1, 9), status=st.sampled_from(
    ["blocked", "ready", "running", "submitted", "landed", "failed", "cancelled"]),
    owner_id=st.none() | st.integers(1, 3), claim_version=st.integers(1, 4), landing=st.booleans())


@FAST
@given(ref=REFS | st.builds(lambda i, v: f"refs/heads/subtasks/{i}/v{v}", st.integers(1, 9), st.integers(1, 5)),
       new=SHA | st.just(ZERO), pusher=st.integers(1, 3), target=st.sampled_from(["main", "trunk"]), row=OWNERS)
def test_judge_ref_accepts_only_the_owner_at_the_current_claim(ref: str, new: str, pusher: int, target: str,
                                                               row: Owner | None) -> None:
    update = RefUpdate(ZERO, new, ref)
    refusal = judge_ref(update, pusher, target, row)
    parsed = parse_subtask_ref(ref)
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
    protected = is_protected(path, patterns)
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
    content = Content(changed_paths=paths, commit_count=commits, roots=roots, foreign=[],
                      largest_file=("f", largest), push_bytes=push_bytes, already_on_target=on_target)
    limits = Limits(protected_paths=patterns, max_file_bytes=10**6, max_push_bytes=10**8)
    refusal = judge_content(RefUpdate(ZERO, "a" * 40, "refs/heads/subtasks/1/v1"), "main", content, limits)
    if any(is_protected(p, patterns) for p in paths):
        assert refusal is not None
    if refusal is None:
        assert not any(is_protected(p, patterns) for p in paths) and not roots and not on_target
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


@pytest.fixture
def hooks_app(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings, run_recovery=False, run_queue=False)) as client:
        yield client


async def test_hook_endpoints_take_any_body_without_a_5xx(db: Database, hooks_app: TestClient) -> None:
    await db.landing.create_repo(name="demo", target_branch="main", verifier_command="true", verifier_timeout_s=60,
                                 protected_paths=["ci/"], max_push_bytes=1 << 20, max_file_bytes=1 << 20, root_sha=ZERO)
    agent, _ = await db.agents.add_agent(name="ann", role=Role.AGENT)
    client = hooks_app
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

@pytest.fixture
async def api_server(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> Any:
    tokens: dict[str | None, str] = {}
    for name, role in (("fuzz-admin-7f3e", Role.ADMIN), ("ann", Role.AGENT), ("rita", Role.REVIEWER)):
        _, tokens[name] = await e2e_db.agents.add_agent(name=name, role=role)
    agent = await e2e_db.agents.agent_by_name("ann")
    for title in ("one", "two", "three"):
        await e2e_db.subtasks.create_subtask(actor_id=None, title=title)
    await e2e_db.subtasks.claim(agent_id=agent.id)
    bot = BotProcess(e2e_db_url, tmp_path / "data", MERGEBOT_VERIFIER_WORKERS="0").start()
    try:
        yield bot, tokens
    finally:
        bot.stop()


async def test_values_postgres_cannot_store_are_422_not_500(db: Database, hooks_app: TestClient) -> None:
    """Found by the API run below: a NUL in any text, or an integer past bigint, used to be a 500."""
    _, token = await db.agents.add_agent(name="rita", role=Role.REVIEWER)
    _, lead = await db.agents.add_agent(name="lead", role=Role.LEAD)
    auth = {"Authorization": f"Bearer {token}"}
    for path in ("/api/v1/subtasks?group=a%00b", "/api/v1/subtasks/99999999999999999999/events",
                 "/api/v1/landed?before=-99999999999999999999", "/api/v1/candidates?repo=%00"):
        r = hooks_app.get(path, headers=auth)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid", (path, r.text)
    r = hooks_app.post("/api/v1/notes", json={"body": "a\u0000b"}, headers={"Authorization": f"Bearer {lead}"})
    assert r.status_code == 422, r.text


def test_openapi_documents_the_error_shape_not_fastapis(hooks_app: TestClient) -> None:
    spec = hooks_app.get("/openapi.json").json()
    claim = spec["paths"]["/api/v1/subtasks/claim"]["post"]["responses"]
    for status in ("401", "403", "409", "422"):
        ref = claim[status]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ErrorOut")
    assert "HTTPValidationError" not in json.dumps(spec)


async def test_schemathesis_api_no_5xx_and_responses_as_documented(api_server: Any) -> None:
    import schemathesis
    from schemathesis import checks as st_checks
    from schemathesis.generation.modes import GenerationMode
    from schemathesis.specs.openapi import checks as oa_checks

    bot, tokens = api_server
    callers: list[str | None] = [None, *tokens]
    schema = schemathesis.openapi.from_url(f"{bot.url}/openapi.json")
    checks = [st_checks.not_a_server_error, oa_checks.status_code_conformance, oa_checks.content_type_conformance,
              oa_checks.response_schema_conformance, oa_checks.response_headers_conformance]
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]  # Err raises
    assert len(operations) >= 40
    tried: dict[str, set[str | None]] = {}

    def run(op: Any) -> None:
        raw = op.definition.raw
        strategy = op.as_strategy(GenerationMode.POSITIVE)
        if raw.get("parameters") or raw.get("requestBody"):
            strategy = strategy | op.as_strategy(GenerationMode.NEGATIVE)
        secured = bool(raw.get("security"))

        @settings(max_examples=6, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy, who=st.sampled_from(callers))
        def one(case: Any, who: str | None) -> None:
            # long polls are cut short: a wait of up to 60 s per example would be the whole budget
            if isinstance(case.body, dict) and op.path.endswith("/wait"):
                t = case.body.get("timeout", 30)
                if isinstance(t, int | float) and not isinstance(t, bool) and 0 <= t <= 60:
                    case.body["timeout"] = 0
            if isinstance(case.query, dict) and isinstance(case.query.get("wait"), int | float):
                case.query["wait"] = 0 if 0 <= case.query["wait"] <= 60 else case.query["wait"]
            headers = {"Authorization": f"Bearer {tokens[who]}"} if who else {}
            response = case.call_and_validate(base_url=bot.url, headers=headers, checks=checks, timeout=15)
            tried.setdefault(op.label, set()).add(who)
            if secured and who is None:
                assert response.status_code in (400, 401, 413), (op.label, response.status_code)

        one()

    for op in operations:
        run(op)
    assert len(tried) == len(operations)
    log = bot.log.read_text()
    assert "Traceback" not in log and '"level": "error"' not in log
