"""Hostile input, generated, for the webhook parser: arbitrary bytes, arbitrary headers and arbitrary signatures,
the JSON parser on any text, and the HTTP endpoints on a real database (a malformed delivery is a 4xx and changes
nothing). ``tests/test_webhook_parser_*.py`` cover signed JSON objects and mutated recorded payloads.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import assume, given
from hypothesis import strategies as st

from mergebot.api import create_app
from mergebot.db.database import Database
from mergebot.forge.sansio import (
    MAX_DEPTH,
    WebhookError,
    parse_delivery,
    parse_json,
    to_event,
    verify_signature,
)
from mergebot.rules import Rules
from mergebot.settings import Settings
from tests.support.fuzzing import FAST, HTTP, ZERO
from tests.support.webhooks import json_depth

SECRET = b"whsec-fuzz-3Jk9"
SECRET_ENV = "MB_FUZZ_WEBHOOK_SECRET"


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
    if json_depth(value) <= MAX_DEPTH:
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
        await db.repos.create_repo(name=repo.split("/")[1], root_sha=ZERO, rules=Rules.of(target_branch="main",
                                   verifier_command="true", verifier_timeout_s=60, protected_paths=[],
                                   max_push_bytes=1 << 20, max_file_bytes=1 << 20),
                                   forge={
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
