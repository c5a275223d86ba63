"""The pure webhook parser, what a delivery means: recorded GitHub/Gitea/Forgejo payloads in, ForgeEvents out.

No database, no network: every case signs a recorded payload (or a mutation of one), runs ``parse_delivery``
and ``to_event``, and compares whole values; odd but valid refs are kept verbatim, bad ones and malformed
shapes are a 400 naming the field. Who sent it (detection, signatures, headers) is in
``test_webhook_parser_delivery.py``, the strict JSON reader in ``test_webhook_parser_json.py``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from mergebot.forge.sansio import (
    Delivery,
    ForgeEvent,
    WebhookError,
    parse_delivery,
    parse_json,
    to_event,
)
from tests.support.webhooks import (
    DELIVERY,
    FJ_BEFORE,
    FJ_C1,
    GH_BRANCH,
    GH_C1,
    GH_C2,
    GH_C3,
    GH_PR43,
    GH_REPO,
    GH_TAG,
    GT_BRANCH,
    GT_C1,
    GT_C2,
    GT_REPO,
    GT_S0,
    GT_S2,
    GT_TAG,
    MAIN,
    OTHER,
    PAYLOADS,
    SECRET,
    Z40,
    dump,
    event_of,
    expect,
    gitea_headers,
    github_headers,
    headers_for,
    load,
    load_obj,
    status_of,
)

Case = tuple[str, str, str, str | None, ForgeEvent]
PUSHERS = {"github": (GH_REPO, "agent-7"), "gitea": (GT_REPO, "agent-3"), "forgejo": (GT_REPO, "agent-5")}


def push(fixture: str, ref: str, before: str, after: str, repository: str | None = None, **flags: bool) -> Case:
    """A recorded push (its forge is the fixture's first word) by that forge's agent, to its repository unless
    ``repository`` names another; the pushed head is ``after``. GitHub sends no X-*-Event-Type, Gitea and Forgejo
    send ``push``."""
    forge = fixture.split("_")[0]
    default, sender = PUSHERS[forge]
    return (fixture, forge, "push", None if forge == "github" else "push", expect(
        forge, "push", repository=repository or default, ref=ref, before=before, after=after, sender=sender,
        head_sha=after, **flags))


# (fixture, forge, event header, Gitea's X-*-Event-Type, expected event)
CASES: list[Case] = [
    # ---- GitHub push
    push("github_push_branch_create.json", GH_BRANCH, Z40, GH_C1, created=True, candidate=True),
    push("github_push_branch_update.json", GH_BRANCH, GH_C1, GH_C2, candidate=True),
    push("github_push_branch_force.json", GH_BRANCH, GH_C2, GH_C3, forced=True, candidate=True),
    push("github_push_branch_delete.json", GH_BRANCH, GH_C3, Z40, deleted=True),
    push("github_push_tag.json", "refs/tags/v1.4.0", Z40, GH_TAG, created=True, is_tag=True),
    push("github_push_tag_delete.json", "refs/tags/v1.4.0", GH_TAG, Z40, deleted=True, is_tag=True),
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
    push("gitea_push_branch_create.json", GT_BRANCH, Z40, GT_C1, created=True, candidate=True),
    push("gitea_push_branch_update.json", GT_BRANCH, GT_C1, GT_C2, candidate=True),
    push("gitea_push_tag.json", "refs/tags/v0.9.0", Z40, GT_TAG, created=True, is_tag=True),
    push("gitea_push_sha256.json", MAIN, GT_S0, GT_S2, repository="fleet/gadgets", candidate=True),
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
    push("forgejo_push.json", "refs/heads/agent-5/docs", FJ_BEFORE, FJ_C1, candidate=True),
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


# (fixture, event): each field's path in the payload, with the values that make the payload malformed
_MALFORMED: dict[tuple[str, str], dict[str, list[Any]]] = {
    ("github_push_branch_update.json", "push"): {
        "ref": [_DELETE, 7, ["refs/heads/x"]],
        "before": [_DELETE, GH_C1.upper(), GH_C1[:39]],
        "after": [GH_C2 + "0", None, GT_S2],
        "created": ["yes"],
        "forced": [1],
        "repository": [_DELETE, "octo-fleet/widgets"],
        "repository.full_name": [_DELETE, "widgets", "a/b/c", "/widgets"],
        "sender": ["agent-7"],
        "sender.login": [_DELETE, ""],
    },
    ("gitea_push_branch_update.json", "push"): {"sender.login": [7]},
    ("github_pull_request_opened.json", "pull_request"): {
        "action": [_DELETE, 1],
        "number": ["42", True, 0, 4.2],
        "pull_request": [_DELETE, []],
        "pull_request.head": [None],
        "pull_request.head.sha": [_DELETE, "HEAD"],
        "pull_request.head.ref": [3],
        "pull_request.base": [_DELETE],
        "pull_request.base.ref": [""],
    },
    ("github_pull_request_synchronize.json", "pull_request"): {"before": ["nope"]},
    ("gitea_pull_request_synchronized.json", "pull_request"): {"pull_request.head.sha": [GT_C2[:12]]},
    ("gitea_delete_branch.json", "delete"): {
        "ref_type": ["commit", _DELETE],
        "ref": [_DELETE, ""],
        "repository": [None],
    },
}
SHAPE_ERRORS: list[tuple[str, str, str, Any]] = [
    (fixture, event, path, value)
    for (fixture, event), fields in _MALFORMED.items() for path, values in fields.items() for value in values]


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
