"""The pure webhook parser, who sent a delivery and how: forge detection, signatures (every way one can be
wrong is a 401 before any JSON is read), the size limit, the delivery id and event headers, and the content types
(JSON, or GitHub's form with one ``payload`` field).
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any

import pytest

from mergebot.forge.sansio import (
    MAX_BODY_BYTES,
    WebhookError,
    detect_forge,
    parse_delivery,
    to_event,
    verify_signature,
)
from mergebot.forge.sansio import delivery as sansio_delivery
from tests.support.webhooks import (
    OTHER,
    SECRET,
    forgejo_headers,
    gitea_headers,
    github_headers,
    headers_for,
    load,
    replaced,
    sign,
    status_of,
    without,
)

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

    monkeypatch.setattr(sansio_delivery, "parse_json", never)
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

    monkeypatch.setattr(sansio_delivery, "verify_signature", never)
    monkeypatch.setattr(sansio_delivery, "detect_forge", never)
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
