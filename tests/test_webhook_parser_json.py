"""The pure webhook parser's strict JSON reader (``parse_json``): what it refuses and why, its exact depth and
container limits, and property tests that arbitrary and mutated payloads only ever raise ``WebhookError``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mergebot.forge.sansio import (
    MAX_CONTAINERS,
    MAX_DEPTH,
    ForgeEvent,
    WebhookError,
    parse_delivery,
    parse_json,
    strict_json,
    to_event,
)
from tests.support.webhooks import (
    GH_C1,
    GT_S2,
    OTHER,
    PAYLOADS,
    SECRET,
    Z40,
    github_headers,
    headers_for,
    json_depth,
    status_of,
)

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
    monkeypatch.setattr(strict_json, "MAX_CONTAINERS", 100)
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


@settings(max_examples=100, deadline=None)
@given(value=NASTY_VALUES, extra=st.integers(min_value=0, max_value=70), ascii_only=st.booleans())
def test_depth_check_is_exact_around_nasty_strings(value: object, extra: int, ascii_only: bool) -> None:
    nested: object = value
    for _ in range(extra):
        nested = [nested, '"]}\\', {"[": "\\\""}]
    obj = {"v": nested, "w": value}
    body = json.dumps(obj, ensure_ascii=ascii_only).encode()
    if json_depth(obj) <= MAX_DEPTH:
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
