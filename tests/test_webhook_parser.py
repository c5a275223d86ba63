"""The pure webhook parser: recorded GitHub/Gitea/Forgejo payloads in, ForgeEvents out.

No database, no network: every case signs a recorded payload (or a mutation of
one), runs ``parse_delivery`` and ``to_event``, and compares whole values.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mergebot.forge import sansio
from mergebot.forge.sansio import (
    MAX_BODY_BYTES,
    MAX_CONTAINERS,
    MAX_DEPTH,
    Delivery,
    ForgeEvent,
    Headers,
    WebhookError,
    detect_forge,
    parse_delivery,
    parse_json,
    to_event,
    verify_signature,
)

PAYLOADS = Path(__file__).parent / "forge_payloads"
SECRET = b"whsec-fleet-widgets-7Qm2"
OTHER = b"whsec-fleet-gadgets-Lx91"
DELIVERY = "9b3c0f4e-3d6a-11f0-8c1a-7e2b9c2f6a10"
Z40 = "0" * 40

# Object names in the recorded payloads.
GH_C1 = "ef8a50cc608150b8a9079e7c977e0645b7946238"
GH_C2 = "0c44607bfcc6ddbadf635fce83627eebd5e96f2d"
GH_C3 = "b964dff4bc59f450826cb2961207ff135d49d378"
GH_TAG = "f9f6fd2c40d9712fa4bc37982a2cc8805a5d18d4"
GH_PR43 = "09ee5da287f5989e48286f3bfaf384db5df83e24"
GT_C1 = "e07c387b9d01c40519d6e116785ada7efe3c78e1"
GT_C2 = "7e8260ce8dc26fc7423cc5f3f5483b670fc463de"
GT_TAG = "ad718c40376aaf279986e73a09d16f994714cf92"
GT_S0 = "2c1258ec4087dd050d2939faa1755f8cde4bf4b448e1bbae4094a3dd14f9bbd1"
GT_S2 = "40dca4a06c6be8b54c56aa456ff32300c38a82a2271f1d8a57d6f2c8b823f414"
FJ_BEFORE = "295b196c2fd53d971d90ee6fc4fdab9c4bbcca8a"
FJ_C1 = "b81070fff752597ecdcb59a869226ac9b2a389bc"


# --------------------------------------------------------------------------- helpers


def load(name: str) -> bytes:
    return (PAYLOADS / name).read_bytes()


def load_obj(name: str) -> dict[str, Any]:
    value = json.loads(load(name))
    assert isinstance(value, dict)
    return value


def dump(obj: object) -> bytes:
    return json.dumps(obj).encode()


def sign(body: bytes, secret: bytes = SECRET) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def github_headers(
    event: str, body: bytes, *, secret: bytes = SECRET, delivery: str = DELIVERY
) -> list[tuple[str, str]]:
    """Headers as GitHub sends them (lower-cased by the server)."""
    return [
        ("host", "mergebot.fleet.example"),
        ("user-agent", "GitHub-Hookshot/8e2a1f4"),
        ("content-type", "application/json"),
        ("accept", "*/*"),
        ("x-github-delivery", delivery),
        ("x-github-event", event),
        ("x-github-hook-id", "548127730"),
        ("x-github-hook-installation-target-id", "735104228"),
        ("x-github-hook-installation-target-type", "repository"),
        ("x-hub-signature", "sha1=" + hmac.new(secret, body, hashlib.sha1).hexdigest()),
        ("x-hub-signature-256", "sha256=" + sign(body, secret)),
    ]


def gitea_headers(
    event: str, body: bytes, *, event_type: str | None = None, secret: bytes = SECRET, delivery: str = DELIVERY
) -> list[tuple[str, str]]:
    """Headers as Gitea's services/webhook/deliver.go sends them: its own, Gogs' and GitHub's."""
    sig = sign(body, secret)
    kind = event_type or event
    return [
        ("host", "mergebot.fleet.example"),
        ("user-agent", "Go-http-client/1.1"),
        ("content-type", "application/json"),
        ("x-github-delivery", delivery),
        ("x-github-event", event),
        ("x-github-event-type", kind),
        ("x-gitea-delivery", delivery),
        ("x-gitea-event", event),
        ("x-gitea-event-type", kind),
        ("x-gitea-signature", sig),
        ("x-gogs-delivery", delivery),
        ("x-gogs-event", event),
        ("x-gogs-event-type", kind),
        ("x-gogs-signature", sig),
        ("x-hub-signature", "sha1=" + hmac.new(secret, body, hashlib.sha1).hexdigest()),
        ("x-hub-signature-256", "sha256=" + sig),
    ]


def forgejo_headers(
    event: str, body: bytes, *, event_type: str | None = None, secret: bytes = SECRET, delivery: str = DELIVERY
) -> list[tuple[str, str]]:
    """Forgejo sends X-Forgejo-* and, for compatibility, everything Gitea sends."""
    sig = sign(body, secret)
    kind = event_type or event
    own = [
        ("x-forgejo-delivery", delivery),
        ("x-forgejo-event", event),
        ("x-forgejo-event-type", kind),
        ("x-forgejo-signature", sig),
    ]
    return own + gitea_headers(event, body, event_type=event_type, secret=secret, delivery=delivery)


def headers_for(forge: str, event: str, body: bytes, **kw: Any) -> list[tuple[str, str]]:
    if forge == "github":
        kw.pop("event_type", None)
        return github_headers(event, body, **kw)
    if forge == "gitea":
        return gitea_headers(event, body, **kw)
    return forgejo_headers(event, body, **kw)


def without(headers: Headers, *names: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k not in names]


def replaced(headers: Headers, name: str, value: str) -> list[tuple[str, str]]:
    return [(k, value if k == name else v) for k, v in headers]


def status_of(headers: Headers, body: bytes, secrets: list[bytes] | None = None) -> int:
    with pytest.raises(WebhookError) as info:
        to_event(parse_delivery(headers, body, [SECRET] if secrets is None else secrets))
    return info.value.status


def event_of(forge: str, event: str, obj: dict[str, Any], event_type: str | None = None) -> ForgeEvent:
    body = dump(obj)
    return to_event(parse_delivery(headers_for(forge, event, body, event_type=event_type), body, [SECRET]))


def expect(forge: str, event: str, **fields: Any) -> ForgeEvent:
    """A ForgeEvent with every field not named set to None/False."""
    base: dict[str, Any] = {
        "action": None,
        "repository": None,
        "ref": None,
        "before": None,
        "after": None,
        "sender": None,
        "pr_number": None,
        "head_sha": None,
        "base_ref": None,
        "created": False,
        "deleted": False,
        "forced": False,
        "is_tag": False,
        "candidate": False,
    }
    unknown = set(fields) - set(base)
    assert not unknown, unknown
    return ForgeEvent(forge=forge, event=event, **(base | fields))


GH_REPO = "octo-fleet/widgets"
GT_REPO = "fleet/widgets"
GH_BRANCH = "refs/heads/agent-7/sizing"
GT_BRANCH = "refs/heads/agent-3/cache"
MAIN = "refs/heads/main"

# (fixture, forge, event header, Gitea's X-*-Event-Type, expected event)
CASES: list[tuple[str, str, str, str | None, ForgeEvent]] = [
    # ---- GitHub push
    ("github_push_branch_create.json", "github", "push", None, expect(
        "github", "push", repository=GH_REPO, ref=GH_BRANCH, before=Z40, after=GH_C1, sender="agent-7",
        head_sha=GH_C1, created=True, candidate=True)),
    ("github_push_branch_update.json", "github", "push", None, expect(
        "github", "push", repository=GH_REPO, ref=GH_BRANCH, before=GH_C1, after=GH_C2, sender="agent-7",
        head_sha=GH_C2, candidate=True)),
    ("github_push_branch_force.json", "github", "push", None, expect(
        "github", "push", repository=GH_REPO, ref=GH_BRANCH, before=GH_C2, after=GH_C3, sender="agent-7",
        head_sha=GH_C3, forced=True, candidate=True)),
    ("github_push_branch_delete.json", "github", "push", None, expect(
        "github", "push", repository=GH_REPO, ref=GH_BRANCH, before=GH_C3, after=Z40, sender="agent-7",
        head_sha=Z40, deleted=True)),
    ("github_push_tag.json", "github", "push", None, expect(
        "github", "push", repository=GH_REPO, ref="refs/tags/v1.4.0", before=Z40, after=GH_TAG, sender="agent-7",
        head_sha=GH_TAG, created=True, is_tag=True)),
    ("github_push_tag_delete.json", "github", "push", None, expect(
        "github", "push", repository=GH_REPO, ref="refs/tags/v1.4.0", before=GH_TAG, after=Z40, sender="agent-7",
        head_sha=Z40, deleted=True, is_tag=True)),
    # ---- GitHub pull_request
    ("github_pull_request_opened.json", "github", "pull_request", None, expect(
        "github", "pull_request", action="opened", repository=GH_REPO, ref=GH_BRANCH, sender="agent-7",
        pr_number=42, head_sha=GH_C2, base_ref=MAIN, candidate=True)),
    ("github_pull_request_synchronize.json", "github", "pull_request", None, expect(
        "github", "pull_request", action="synchronize", repository=GH_REPO, ref=GH_BRANCH, before=GH_C2,
        after=GH_C3, sender="agent-7", pr_number=42, head_sha=GH_C3, base_ref=MAIN, candidate=True)),
    ("github_pull_request_reopened.json", "github", "pull_request", None, expect(
        "github", "pull_request", action="reopened", repository=GH_REPO, ref=GH_BRANCH, sender="agent-7",
        pr_number=42, head_sha=GH_C3, base_ref=MAIN, candidate=True)),
    ("github_pull_request_closed_merged.json", "github", "pull_request", None, expect(
        "github", "pull_request", action="closed", repository=GH_REPO, ref=GH_BRANCH, sender="mona-ops",
        pr_number=42, head_sha=GH_C3, base_ref=MAIN)),
    ("github_pull_request_closed_unmerged.json", "github", "pull_request", None, expect(
        "github", "pull_request", action="closed", repository=GH_REPO, ref="refs/heads/agent-9/flaky-retry",
        sender="mona-ops", pr_number=43, head_sha=GH_PR43, base_ref=MAIN)),
    # ---- GitHub ping
    ("github_ping.json", "github", "ping", None, expect(
        "github", "ping", repository=GH_REPO, sender="mona-ops")),
    # ---- Gitea push
    ("gitea_push_branch_create.json", "gitea", "push", "push", expect(
        "gitea", "push", repository=GT_REPO, ref=GT_BRANCH, before=Z40, after=GT_C1, sender="agent-3",
        head_sha=GT_C1, created=True, candidate=True)),
    ("gitea_push_branch_update.json", "gitea", "push", "push", expect(
        "gitea", "push", repository=GT_REPO, ref=GT_BRANCH, before=GT_C1, after=GT_C2, sender="agent-3",
        head_sha=GT_C2, candidate=True)),
    ("gitea_push_tag.json", "gitea", "push", "push", expect(
        "gitea", "push", repository=GT_REPO, ref="refs/tags/v0.9.0", before=Z40, after=GT_TAG, sender="agent-3",
        head_sha=GT_TAG, created=True, is_tag=True)),
    ("gitea_push_sha256.json", "gitea", "push", "push", expect(
        "gitea", "push", repository="fleet/gadgets", ref=MAIN, before=GT_S0, after=GT_S2, sender="agent-3",
        head_sha=GT_S2, candidate=True)),
    # ---- Gitea pull_request (one event name, X-Gitea-Event-Type tells them apart)
    ("gitea_pull_request_opened.json", "gitea", "pull_request", "pull_request", expect(
        "gitea", "pull_request", action="opened", repository=GT_REPO, ref=GT_BRANCH, sender="agent-3",
        pr_number=5, head_sha=GT_C1, base_ref=MAIN, candidate=True)),
    ("gitea_pull_request_synchronized.json", "gitea", "pull_request", "pull_request_sync", expect(
        "gitea", "pull_request", action="synchronize", repository=GT_REPO, ref=GT_BRANCH, sender="agent-3",
        pr_number=5, head_sha=GT_C2, base_ref=MAIN, candidate=True)),
    ("gitea_pull_request_reopened.json", "gitea", "pull_request", "pull_request", expect(
        "gitea", "pull_request", action="reopened", repository=GT_REPO, ref=GT_BRANCH, sender="agent-3",
        pr_number=5, head_sha=GT_C2, base_ref=MAIN, candidate=True)),
    ("gitea_pull_request_closed.json", "gitea", "pull_request", "pull_request", expect(
        "gitea", "pull_request", action="closed", repository=GT_REPO, ref=GT_BRANCH, sender="agent-3",
        pr_number=5, head_sha=GT_C2, base_ref=MAIN)),
    # ---- Gitea delete (short name + ref_type)
    ("gitea_delete_branch.json", "gitea", "delete", "delete", expect(
        "gitea", "delete", repository=GT_REPO, ref=GT_BRANCH, sender="agent-3", deleted=True)),
    ("gitea_delete_tag.json", "gitea", "delete", "delete", expect(
        "gitea", "delete", repository=GT_REPO, ref="refs/tags/v0.9.0", sender="agent-3", deleted=True, is_tag=True)),
    # ---- Forgejo push
    ("forgejo_push.json", "forgejo", "push", "push", expect(
        "forgejo", "push", repository=GT_REPO, ref="refs/heads/agent-5/docs", before=FJ_BEFORE, after=FJ_C1,
        sender="agent-5", head_sha=FJ_C1, candidate=True)),
]


# --------------------------------------------------------------------------- recorded payloads


@pytest.mark.parametrize(("fixture", "forge", "event", "event_type", "expected"), CASES, ids=[c[0] for c in CASES])
def test_recorded_payload(fixture: str, forge: str, event: str, event_type: str | None, expected: ForgeEvent) -> None:
    body = load(fixture)
    delivery = parse_delivery(headers_for(forge, event, body, event_type=event_type), body, [OTHER, SECRET])
    assert delivery == Delivery(
        forge=forge,
        event=event,
        delivery_id=DELIVERY,
        body_sha256=hashlib.sha256(body).hexdigest(),
        secret_index=1,
        payload=json.loads(body),
    )
    assert to_event(delivery) == expected


def test_every_recorded_payload_has_a_case() -> None:
    assert sorted(p.name for p in PAYLOADS.glob("*.json")) == sorted(c[0] for c in CASES)


def test_recorded_payloads_are_strict_json() -> None:
    for path in PAYLOADS.glob("*.json"):
        assert parse_json(path.read_bytes()) == json.loads(path.read_bytes())


def test_sha256_repository_pushes_64_digit_zero_shas() -> None:
    obj = load_obj("gitea_push_sha256.json")
    obj["before"] = "0" * 64
    assert event_of("gitea", "push", obj).created
    obj["before"], obj["after"] = GT_S2, "0" * 64
    got = event_of("gitea", "push", obj)
    assert (got.deleted, got.created, got.candidate) == (True, False, False)


def test_gitea_branch_deletion_as_push() -> None:
    obj = load_obj("gitea_push_branch_update.json")
    obj["before"], obj["after"], obj["commits"], obj["head_commit"] = GT_C2, Z40, [], None
    assert event_of("gitea", "push", obj) == expect(
        "gitea", "push", repository=GT_REPO, ref=GT_BRANCH, before=GT_C2, after=Z40, sender="agent-3",
        head_sha=Z40, deleted=True)


def test_github_flags_cannot_hide_an_all_zero_sha() -> None:
    obj = load_obj("github_push_branch_delete.json")
    obj["deleted"] = False
    got = event_of("github", "push", obj)
    assert got.deleted and not got.candidate
    obj = load_obj("github_push_branch_create.json")
    del obj["created"], obj["deleted"], obj["forced"]
    got = event_of("github", "push", obj)
    assert (got.created, got.deleted, got.forced, got.candidate) == (True, False, False, True)


def test_github_delete_event_has_the_gitea_shape() -> None:
    obj = {"ref": "agent-7/sizing", "ref_type": "branch", "pusher_type": "user",
           "repository": load_obj("github_ping.json")["repository"], "sender": {"login": "agent-7"}}
    assert event_of("github", "delete", obj) == expect(
        "github", "delete", repository=GH_REPO, ref=GH_BRANCH, sender="agent-7", deleted=True)


@pytest.mark.parametrize("fixture", ["github_pull_request_opened.json", "gitea_pull_request_opened.json"])
def test_pull_request_from_another_repository_is_not_a_candidate(fixture: str) -> None:
    forge = fixture.split("_")[0]
    obj = load_obj(fixture)
    obj["pull_request"]["head"]["repo"]["full_name"] = "someone-else/widgets"
    got = event_of(forge, "pull_request", obj)
    assert got.action == "opened" and got.head_sha is not None and not got.candidate
    obj["pull_request"]["head"]["repo"] = None  # the fork was deleted
    assert not event_of(forge, "pull_request", obj).candidate
    obj = load_obj(fixture)
    obj["pull_request"]["head"]["repo"]["full_name"] = obj["repository"]["full_name"].upper()
    assert event_of(forge, "pull_request", obj).candidate  # names compare case-insensitively


@pytest.mark.parametrize("action", ["edited", "assigned", "labeled", "label_updated", "ready_for_review", "closed"])
def test_other_pull_request_actions_are_not_candidates(action: str) -> None:
    obj = load_obj("gitea_pull_request_opened.json")
    obj["action"] = action
    got = event_of("gitea", "pull_request", obj)
    assert got.action == action and not got.candidate


@pytest.mark.parametrize("event", ["issues", "create", "status", "check_suite", "workflow_run", "release"])
def test_unknown_events_are_recorded_never_refused(event: str) -> None:
    assert event_of("github", event, {"action": "created", "zen": 1}) == expect("github", event)
    obj = load_obj("github_ping.json")
    assert event_of("github", event, obj) == expect("github", event, repository=GH_REPO, sender="mona-ops")
    obj["repository"] = "not an object"
    obj["sender"] = {"login": 7}
    assert event_of("github", event, obj) == expect("github", event)


def test_ping_without_repository() -> None:
    obj = load_obj("github_ping.json")
    del obj["repository"]
    obj["hook"]["type"] = "Organization"
    assert event_of("github", "ping", obj) == expect("github", "ping", sender="mona-ops")


# --------------------------------------------------------------------------- odd but valid refs

ODD_REFS = [
    "refs/heads/$(touch x)",
    "refs/heads/-rf",
    "refs/heads/--upload-pack=touch x",
    "refs/heads/`id`",
    "refs/heads/a;rm -rf ~",
    "refs/heads/x'\"\\",
    "refs/heads/ünïcödé/分支/🚀",
    "refs/heads/" + "a" * (1024 - len("refs/heads/")),
]


@pytest.mark.parametrize("ref", ODD_REFS)
def test_odd_push_refs_are_kept_verbatim(ref: str) -> None:
    for fixture, forge in (("github_push_branch_update.json", "github"), ("gitea_push_branch_update.json", "gitea")):
        obj = load_obj(fixture)
        obj["ref"] = ref
        got = event_of(forge, "push", obj)
        assert got.ref == ref and got.candidate


@pytest.mark.parametrize("ref", ODD_REFS[:-1])
def test_odd_pull_request_and_delete_refs_are_kept_verbatim(ref: str) -> None:
    short = ref.removeprefix("refs/heads/")
    obj = load_obj("github_pull_request_synchronize.json")
    obj["pull_request"]["head"]["ref"] = short
    obj["pull_request"]["base"]["ref"] = short
    got = event_of("github", "pull_request", obj)
    assert (got.ref, got.base_ref, got.candidate) == (ref, ref, True)
    obj = load_obj("gitea_delete_branch.json")
    obj["ref"] = short
    assert event_of("gitea", "delete", obj).ref == ref


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "refs/heads/a\x00b",
        "refs/heads/a\nb",
        "refs/heads/a\rb",
        "refs/heads/a\tb",
        "refs/heads/a\x1bb",
        "refs/heads/a\x7fb",
        "refs/heads/a\x85b",
        "refs/heads/" + "a" * (1025 - len("refs/heads/")),
        "refs/heads/" + "é" * 507,  # 1025 bytes in UTF-8
        "refs/heads/\ud800",
    ],
)
def test_bad_refs_are_refused(ref: str) -> None:
    obj = load_obj("github_push_branch_update.json")
    obj["ref"] = ref
    body = dump(obj)  # ensure_ascii: a lone surrogate travels as \ud800, as a forge could send it
    assert status_of(github_headers("push", body), body) == 400
    obj = load_obj("gitea_pull_request_opened.json")
    obj["pull_request"]["head"]["ref"] = ref.removeprefix("refs/heads/")
    body = dump(obj)
    assert status_of(gitea_headers("pull_request", body), body) == 400


# --------------------------------------------------------------------------- malformed payload shapes


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


_DELETE = _Delete()


def _set(obj: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        obj = obj[key]
    if value is _DELETE:
        del obj[last]
    else:
        obj[last] = value

SHAPE_ERRORS: list[tuple[str, str, str, Any]] = [
    ("github_push_branch_update.json", "push", "ref", _DELETE),
    ("github_push_branch_update.json", "push", "ref", 7),
    ("github_push_branch_update.json", "push", "ref", ["refs/heads/x"]),
    ("github_push_branch_update.json", "push", "before", _DELETE),
    ("github_push_branch_update.json", "push", "before", GH_C1.upper()),
    ("github_push_branch_update.json", "push", "before", GH_C1[:39]),
    ("github_push_branch_update.json", "push", "after", GH_C2 + "0"),
    ("github_push_branch_update.json", "push", "after", None),
    ("github_push_branch_update.json", "push", "after", GT_S2),
    ("github_push_branch_update.json", "push", "created", "yes"),
    ("github_push_branch_update.json", "push", "forced", 1),
    ("github_push_branch_update.json", "push", "repository", _DELETE),
    ("github_push_branch_update.json", "push", "repository", "octo-fleet/widgets"),
    ("github_push_branch_update.json", "push", "repository.full_name", _DELETE),
    ("github_push_branch_update.json", "push", "repository.full_name", "widgets"),
    ("github_push_branch_update.json", "push", "repository.full_name", "a/b/c"),
    ("github_push_branch_update.json", "push", "repository.full_name", "/widgets"),
    ("github_push_branch_update.json", "push", "sender", "agent-7"),
    ("github_push_branch_update.json", "push", "sender.login", _DELETE),
    ("github_push_branch_update.json", "push", "sender.login", ""),
    ("gitea_push_branch_update.json", "push", "sender.login", 7),
    ("github_pull_request_opened.json", "pull_request", "action", _DELETE),
    ("github_pull_request_opened.json", "pull_request", "action", 1),
    ("github_pull_request_opened.json", "pull_request", "number", "42"),
    ("github_pull_request_opened.json", "pull_request", "number", True),
    ("github_pull_request_opened.json", "pull_request", "number", 0),
    ("github_pull_request_opened.json", "pull_request", "number", 4.2),
    ("github_pull_request_opened.json", "pull_request", "pull_request", _DELETE),
    ("github_pull_request_opened.json", "pull_request", "pull_request", []),
    ("github_pull_request_opened.json", "pull_request", "pull_request.head", None),
    ("github_pull_request_opened.json", "pull_request", "pull_request.head.sha", _DELETE),
    ("github_pull_request_opened.json", "pull_request", "pull_request.head.sha", "HEAD"),
    ("github_pull_request_opened.json", "pull_request", "pull_request.head.ref", 3),
    ("github_pull_request_opened.json", "pull_request", "pull_request.base", _DELETE),
    ("github_pull_request_opened.json", "pull_request", "pull_request.base.ref", ""),
    ("github_pull_request_synchronize.json", "pull_request", "before", "nope"),
    ("gitea_pull_request_synchronized.json", "pull_request", "pull_request.head.sha", GT_C2[:12]),
    ("gitea_delete_branch.json", "delete", "ref_type", "commit"),
    ("gitea_delete_branch.json", "delete", "ref_type", _DELETE),
    ("gitea_delete_branch.json", "delete", "ref", _DELETE),
    ("gitea_delete_branch.json", "delete", "ref", ""),
    ("gitea_delete_branch.json", "delete", "repository", None),
]


@pytest.mark.parametrize(("fixture", "event", "path", "value"), SHAPE_ERRORS,
                         ids=[f"{c[1]}-{c[2]}-{c[3]!r:.20}" for c in SHAPE_ERRORS])
def test_malformed_shapes_are_400_naming_the_field(fixture: str, event: str, path: str, value: Any) -> None:
    forge = fixture.split("_")[0]
    obj = load_obj(fixture)
    _set(obj, path, value)
    body = dump(obj)
    delivery = parse_delivery(headers_for(forge, event, body), body, [SECRET])
    with pytest.raises(WebhookError) as info:
        to_event(delivery)
    assert info.value.status == 400
    leaf = path.split(".")[-1]
    assert leaf in info.value.message or path in info.value.message


# --------------------------------------------------------------------------- forge detection


def test_detect_forge() -> None:
    body = b"{}"
    assert detect_forge(github_headers("push", body)) == "github"
    assert detect_forge(gitea_headers("push", body)) == "gitea"  # although X-GitHub-Event is there too
    assert detect_forge(forgejo_headers("push", body)) == "forgejo"
    assert detect_forge([("x-forgejo-signature", "0" * 64)]) == "forgejo"
    assert detect_forge([("X-Gitea-Event", "push")]) == "gitea"
    for headers in ([], [("x-gogs-event", "push")], [("x-gitlab-event", "Push Hook")], [("content-type", "json")]):
        with pytest.raises(WebhookError) as info:
            detect_forge(headers)
        assert info.value.status == 400


def test_gitea_is_not_mistaken_for_github() -> None:
    body = load("gitea_push_branch_update.json")
    headers = gitea_headers("push", body)
    assert ("x-github-event", "push") in headers and ("x-hub-signature-256", "sha256=" + sign(body)) in headers
    # A bad Gitea signature fails even though X-Hub-Signature-256 would verify: Gitea's own header rules.
    assert status_of(replaced(headers, "x-gitea-signature", "0" * 64), body) == 401
    assert parse_delivery(headers, body, [SECRET]).forge == "gitea"


# --------------------------------------------------------------------------- signatures

NOT_JSON = b"\xff\xfe this is not JSON {"


def _bad_signature_cases() -> list[tuple[str, str, list[tuple[str, str]]]]:
    body = NOT_JSON
    good = sign(body)
    other = sign(body, OTHER)
    gh = github_headers("push", body)
    gt = gitea_headers("push", body)
    fj = forgejo_headers("push", body)
    return [
        ("github-missing", "github", without(gh, "x-hub-signature-256")),
        ("github-only-sha1", "github", without(gh, "x-hub-signature-256")),
        ("github-wrong-secret", "github", replaced(gh, "x-hub-signature-256", "sha256=" + other)),
        ("github-truncated", "github", replaced(gh, "x-hub-signature-256", "sha256=" + good[:63])),
        ("github-too-long", "github", replaced(gh, "x-hub-signature-256", "sha256=" + good + "0")),
        ("github-non-hex", "github", replaced(gh, "x-hub-signature-256", "sha256=" + good[:63] + "g")),
        ("github-no-prefix", "github", replaced(gh, "x-hub-signature-256", good)),
        ("github-sha1-prefix", "github", replaced(gh, "x-hub-signature-256", "sha1=" + good)),
        ("github-upper-prefix", "github", replaced(gh, "x-hub-signature-256", "SHA256=" + good)),
        ("github-space", "github", replaced(gh, "x-hub-signature-256", "sha256= " + good)),
        ("github-newline", "github", replaced(gh, "x-hub-signature-256", "sha256=" + good + "\n")),
        ("github-empty", "github", replaced(gh, "x-hub-signature-256", "")),
        ("github-duplicate-equal", "github", [*gh, ("x-hub-signature-256", "sha256=" + good)]),
        ("github-duplicate-other", "github", [*gh, ("x-hub-signature-256", "sha256=" + other)]),
        ("gitea-missing", "gitea", without(gt, "x-gitea-signature")),
        ("gitea-wrong-secret", "gitea", replaced(gt, "x-gitea-signature", other)),
        ("gitea-truncated", "gitea", replaced(gt, "x-gitea-signature", good[:60])),
        ("gitea-non-hex", "gitea", replaced(gt, "x-gitea-signature", "z" + good[1:])),
        ("gitea-prefixed", "gitea", replaced(gt, "x-gitea-signature", "sha256=" + good)),
        ("gitea-duplicate-equal", "gitea", [*gt, ("x-gitea-signature", good)]),
        ("forgejo-missing-both", "forgejo", without(fj, "x-forgejo-signature", "x-gitea-signature")),
        ("forgejo-wrong", "forgejo", replaced(replaced(fj, "x-forgejo-signature", other), "x-gitea-signature", other)),
        ("forgejo-disagree", "forgejo", replaced(fj, "x-gitea-signature", other)),
        ("forgejo-duplicate", "forgejo", [*fj, ("x-forgejo-signature", good)]),
        ("forgejo-truncated", "forgejo", replaced(without(fj, "x-gitea-signature"), "x-forgejo-signature", good[:-1])),
    ]


BAD_SIGNATURES = _bad_signature_cases()


@pytest.mark.parametrize(("name", "forge", "headers"), BAD_SIGNATURES, ids=[c[0] for c in BAD_SIGNATURES])
def test_bad_signatures_are_401_before_any_json(
    name: str, forge: str, headers: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(body: bytes) -> dict[str, Any]:
        raise AssertionError("parse_json reached before the signature was checked")

    monkeypatch.setattr(sansio, "parse_json", never)
    assert detect_forge(headers) == forge
    with pytest.raises(WebhookError) as info:
        parse_delivery(headers, NOT_JSON, [SECRET])
    assert info.value.status == 401, info.value.message
    assert info.value.message


def test_good_signature_on_non_json_is_400() -> None:
    assert status_of(github_headers("push", NOT_JSON), NOT_JSON) == 400


def test_signature_hex_case_is_ignored() -> None:
    body = load("github_push_branch_update.json")
    headers = replaced(github_headers("push", body), "x-hub-signature-256", "sha256=" + sign(body).upper())
    assert verify_signature("github", headers, body, [SECRET]) == 0
    headers = replaced(gitea_headers("push", body), "x-gitea-signature", sign(body).upper())
    assert verify_signature("gitea", headers, body, [SECRET]) == 0


def test_forgejo_accepts_either_of_its_signature_headers() -> None:
    body = load("forgejo_push.json")
    headers = forgejo_headers("push", body)
    assert verify_signature("forgejo", without(headers, "x-gitea-signature"), body, [SECRET]) == 0
    assert verify_signature("forgejo", without(headers, "x-forgejo-signature"), body, [SECRET]) == 0
    assert verify_signature("forgejo", headers, body, [SECRET]) == 0


def test_secret_index_names_the_matching_secret() -> None:
    body = load("gitea_push_branch_update.json")
    headers = gitea_headers("push", body, secret=OTHER)
    assert verify_signature("gitea", headers, body, [SECRET, b"", OTHER]) == 2
    assert verify_signature("gitea", headers, body, [OTHER, OTHER]) == 0
    assert parse_delivery(headers, body, [b"x", SECRET, OTHER]).secret_index == 2


@pytest.mark.parametrize("secrets", [[], [b""], [b"", b""]])
def test_no_secret_configured_is_401(secrets: list[bytes]) -> None:
    body = load("github_push_branch_update.json")
    # Even a body signed with the empty key (which anyone can compute) is refused.
    headers = github_headers("push", body, secret=b"")
    with pytest.raises(WebhookError) as info:
        verify_signature("github", headers, body, secrets)
    assert info.value.status == 401 and "secret" in info.value.message


def test_unknown_forge_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown forge"):
        verify_signature("gitlab", [], b"{}", [SECRET])


# --------------------------------------------------------------------------- size, delivery id, event


def test_body_over_the_limit_is_413_before_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: object) -> object:
        raise AssertionError("work done on an oversized body")

    monkeypatch.setattr(sansio, "verify_signature", never)
    monkeypatch.setattr(sansio, "detect_forge", never)
    body = b" " * (MAX_BODY_BYTES + 1)
    with pytest.raises(WebhookError) as info:
        parse_delivery([], body, [SECRET])
    assert info.value.status == 413


def test_body_at_the_limit_is_not_413() -> None:
    body = b"{" + b" " * (MAX_BODY_BYTES - 2) + b"}"
    assert len(body) == MAX_BODY_BYTES
    delivery = parse_delivery(github_headers("ping", body), body, [SECRET])
    assert delivery.payload == {}


@pytest.mark.parametrize("forge", ["github", "gitea", "forgejo"])
def test_delivery_id_is_required(forge: str) -> None:
    body = load("github_ping.json")
    headers = headers_for(forge, "ping", body)
    names = {"github": ["x-github-delivery"], "gitea": ["x-gitea-delivery"],
             "forgejo": ["x-forgejo-delivery", "x-gitea-delivery"]}[forge]
    assert status_of(without(headers, *names), body) == 400
    assert status_of([(k, "" if k in names else v) for k, v in headers], body) == 400
    for bad in ("x" * 201, "has space", "tab\there", "ünï"):
        assert status_of([(k, bad if k in names else v) for k, v in headers], body) == 400
    assert parse_delivery([(k, "d" * 200 if k in names else v) for k, v in headers], body, [SECRET]).delivery_id == (
        "d" * 200)
    assert status_of([*headers, (names[0], "another-id")], body) == 400  # two ids for one delivery


def test_forgejo_headers_must_agree_with_their_gitea_copies() -> None:
    body = load("forgejo_push.json")
    headers = forgejo_headers("push", body)
    assert status_of(replaced(headers, "x-gitea-delivery", "other"), body) == 400
    assert status_of(replaced(headers, "x-gitea-event", "pull_request"), body) == 400
    assert parse_delivery(without(headers, "x-gitea-delivery", "x-gitea-event"), body, [SECRET]).event == "push"


@pytest.mark.parametrize("forge", ["gitea", "forgejo"])
def test_event_header_is_required(forge: str) -> None:
    body = load("gitea_push_branch_update.json")
    headers = headers_for(forge, "push", body)
    assert status_of(without(headers, "x-gitea-event", "x-forgejo-event"), body) == 400
    assert status_of(replaced(replaced(headers, "x-gitea-event", "pu sh"), "x-forgejo-event", "pu sh"), body) == 400


# --------------------------------------------------------------------------- strict JSON


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"", "JSON"),
        (b"not json", "JSON"),
        (b'{"a": 1', "JSON"),
        (b'{"a": 1} {"b": 2}', "JSON"),
        (b"{'a': 1}", "JSON"),
        (b'{"a": 1,}', "JSON"),
        (b'{"a": "\xff"}', "UTF-8"),
        (b'{"a": "\xc3"}', "UTF-8"),
        (b'{"a": "\xed\xa0\x80"}', "UTF-8"),  # an encoded surrogate
        (b"\xef\xbb\xbf{}", "JSON"),  # a BOM
        (b'{"a": NaN}', "NaN"),
        (b'{"a": [Infinity]}', "Infinity"),
        (b'{"a": -Infinity}', "Infinity"),
        (b'{"a": 1e400}', "range"),
        (b'{"a": 1, "a": 1}', "duplicate"),
        (b'{"a": 1, "b": 2, "a": 3}', "duplicate"),
        (b'{"a": [{"x": {"k": 1, "k": 2}}]}', "duplicate"),
        (b'{"a": "tab\tinside"}', "JSON"),
        (b"[]", "array"),
        (b'[{"a": 1}]', "array"),
        (b'"a string"', "string"),
        (b"42", "number"),
        (b"-1.5", "number"),
        (b"null", "null"),
        (b"true", "boolean"),
        (b'{"a": ' + b"9" * 5000 + b"}", "JSON"),
        (b"[" * 100_000, "deeper"),
        (b"[" * 100_000 + b"]" * 100_000, "deeper"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "deeper"),
        (b'{"a": ' + b"[" * 64 + b"]" * 64 + b"}", "deeper"),
        (b"{" * 100_000, "deeper"),
        (b'"' + b"[" * 100_000, "JSON"),  # an unterminated string: a syntax error, never a RecursionError
        (b'"\\"' * 50_000 + b"[" * 100_000, "JSON"),  # hostile to a backtracking string scanner
    ],
)
def test_parse_json_refuses(body: bytes, words: str) -> None:
    with pytest.raises(WebhookError) as info:
        parse_json(body)
    assert info.value.status == 400
    assert words.lower() in info.value.message.lower(), info.value.message


def test_parse_json_depth_limit_is_exact() -> None:
    inner = MAX_DEPTH - 1  # the top-level object is one level
    value: Any = parse_json(b'{"a": ' + b"[" * inner + b"]" * inner + b"}")["a"]
    for _ in range(inner - 1):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []
    with pytest.raises(WebhookError):
        parse_json(b'{"a": ' + b"[" * (inner + 1) + b"]" * (inner + 1) + b"}")


def test_parse_json_caps_the_number_of_containers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert MAX_CONTAINERS == 1_000_000
    monkeypatch.setattr(sansio, "MAX_CONTAINERS", 100)
    at_cap = b'{"a": [' + b",".join([b"[]", b"{}"] * 49) + b"]}"  # 1 + 1 + 98
    assert len(parse_json(at_cap)["a"]) == 98
    with pytest.raises(WebhookError) as info:
        parse_json(b'{"a": [' + b",".join([b"[]", b"{}"] * 49) + b', {"b": []}]}')
    assert info.value.status == 400 and "more than 100 arrays and objects" in info.value.message
    assert parse_json(b'{"a": "' + b"[]{}" * 1000 + b'"}')  # inside a string they are only text


def test_parse_json_ignores_brackets_inside_strings() -> None:
    deep = "[" * 100_000 + "{" * 10 + '\\"[[[' + "\\\\"
    body = json.dumps({"a": deep, "b": ["]]]]", {"c": "\\[\\{"}], "d\"[": "x"}).encode()
    assert parse_json(body)["a"] == deep


def test_parse_json_accepts_ordinary_json() -> None:
    body = '{"a": [1, 2.5, -3e2, true, false, null, "é\\u00e9\\ud83d\\ude80"], "b": {"a": {}}, "c": []}'.encode()
    assert parse_json(body) == {"a": [1, 2.5, -300.0, True, False, None, "éé🚀"], "b": {"a": {}}, "c": []}


def test_non_json_and_duplicate_keys_through_parse_delivery() -> None:
    for body in (b"nope", b'{"ref": "refs/heads/a", "ref": "refs/heads/b"}', b"[1]", b"[" * 100_000):
        assert status_of(github_headers("push", body), body) == 400


def form_of(body: bytes, *, quote: Any = None) -> bytes:
    """A JSON body as GitHub sends it with the webhook's content type left at its default."""
    import urllib.parse
    return b"payload=" + (quote or urllib.parse.quote_plus)(body.decode()).encode()


FORM = "application/x-www-form-urlencoded"


@pytest.mark.parametrize("name", ["github_push_branch_update.json", "github_pull_request_synchronize.json",
                                  "github_ping.json"])
def test_a_form_encoded_delivery_parses_like_its_json_twin(name: str) -> None:
    import urllib.parse
    body = load(name)
    event = {"github_ping.json": "ping", "github_push_branch_update.json": "push"}.get(name, "pull_request")
    twin = parse_delivery(github_headers(event, body), body, [SECRET])
    for quote in (urllib.parse.quote_plus, urllib.parse.quote):  # '+' or '%20' for a space: both are a form
        form = form_of(body, quote=quote)
        headers = replaced(github_headers(event, form), "content-type", FORM)
        got = parse_delivery(headers, form, [SECRET])
        assert got.payload == twin.payload and got.event == twin.event
        assert got.body_sha256 == hashlib.sha256(form).hexdigest()  # the delivery is the bytes as sent
        assert to_event(got) == to_event(twin)
        # the signature is over the form as sent: one made over the JSON inside does not pass
        signed_inner = replaced(headers, "x-hub-signature-256", "sha256=" + sign(body))
        assert status_of(signed_inner, form) == 401


def test_a_form_delivery_must_hold_exactly_one_payload_field() -> None:
    body = load("github_push_branch_update.json")
    for form in (form_of(body) + b"&x=1", b"x=1", b"payload=" + body.replace(b"{", b"%FF", 1), b"payload",
                 b"payload=%7B&payload=%7D", b"", "payload={\"a\": \"é\"}".encode()):
        headers = replaced(github_headers("push", form), "content-type", FORM)
        assert status_of(headers, form) == 400, form[:40]


def test_content_types_other_than_json_or_a_form_are_415() -> None:
    body = load("github_push_branch_update.json")
    for media in ("text/plain", "application/xml", "multipart/form-data; boundary=x", "", "json"):
        assert status_of(replaced(github_headers("push", body), "content-type", media), body) == 415, media
    twice = [*github_headers("push", body), ("content-type", "application/json")]
    assert status_of(twice, body) == 415
    for media in ("application/json; charset=utf-8", "Application/JSON"):  # parameters and case do not matter
        assert parse_delivery(replaced(github_headers("push", body), "content-type", media), body, [SECRET])
    assert parse_delivery(without(github_headers("push", body), "content-type"), body, [SECRET])  # read as JSON


def test_webhook_error_shape() -> None:
    err = WebhookError(401, "bad signature")
    assert (err.status, err.message) == (401, "bad signature")
    assert "bad signature" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert (again.status, again.message) == (401, "bad signature")


# --------------------------------------------------------------------------- property tests

SHAPE_KEYS = st.sampled_from([
    "ref", "before", "after", "repository", "full_name", "sender", "login", "pull_request", "head", "base",
    "sha", "repo", "number", "action", "ref_type", "created", "deleted", "forced", "commits",
])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from([Z40, GH_C1, GT_S2, "0" * 64, "refs/heads/main", "refs/tags/v1", "owner/name", "synchronized"])
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(SHAPE_KEYS | st.text(max_size=8), children,
                                                                        max_size=5),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(SHAPE_KEYS | st.text(max_size=8), JSON_VALUES, max_size=6)
EVENTS = st.sampled_from(["push", "pull_request", "delete", "ping", "issues", "create"])
FORGES = st.sampled_from(["github", "gitea", "forgejo"])
FIXTURE_OBJECTS = {p.name: json.loads(p.read_bytes()) for p in sorted(PAYLOADS.glob("*.json"))}


NASTY_TEXT = st.text(alphabet='"\\[]{}a,:é\n/u', max_size=12)
NASTY_VALUES = st.recursive(
    NASTY_TEXT | st.integers(min_value=-9, max_value=9),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(NASTY_TEXT, children, max_size=3),
    max_leaves=10,
)


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=100, deadline=None)
@given(value=NASTY_VALUES, extra=st.integers(min_value=0, max_value=70), ascii_only=st.booleans())
def test_depth_check_is_exact_around_nasty_strings(value: object, extra: int, ascii_only: bool) -> None:
    nested: object = value
    for _ in range(extra):
        nested = [nested, '"]}\\', {"[": "\\\""}]
    obj = {"v": nested, "w": value}
    body = json.dumps(obj, ensure_ascii=ascii_only).encode()
    if _depth(obj) <= MAX_DEPTH:
        assert parse_json(body) == obj
    else:
        with pytest.raises(WebhookError, match="deeper"):
            parse_json(body)


def _only_webhook_errors(forge: str, event: str, obj: object) -> None:
    body = json.dumps(obj).encode()
    headers = headers_for(forge, event, body)
    try:
        got = to_event(parse_delivery(headers, body, [OTHER, SECRET]))
    except WebhookError as e:
        assert e.status == 400
        return
    assert isinstance(got, ForgeEvent)
    if got.candidate:
        assert got.ref is not None and got.ref.startswith("refs/heads/") and got.head_sha is not None
        assert not got.deleted and not got.is_tag


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forge=FORGES, event=EVENTS, obj=JSON_OBJECTS)
def test_arbitrary_objects_only_raise_webhook_error(forge: str, event: str, obj: dict[str, Any]) -> None:
    _only_webhook_errors(forge, event, obj)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), forge=FORGES, event=EVENTS)
def test_mutated_recorded_payloads_only_raise_webhook_error(data: st.DataObject, forge: str, event: str) -> None:
    name = data.draw(st.sampled_from(sorted(FIXTURE_OBJECTS)))
    obj = copy.deepcopy(FIXTURE_OBJECTS[name])
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        node: Any = obj
        while True:
            keys: list[Any] = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = data.draw(st.sampled_from(keys))
            child = node[key]
            if isinstance(child, dict | list) and child and data.draw(st.booleans()):
                node = child
                continue
            if isinstance(node, dict) and data.draw(st.booleans()):
                del node[key]
            else:
                node[key] = data.draw(JSON_VALUES)
            break
    _only_webhook_errors(forge, event, obj)
