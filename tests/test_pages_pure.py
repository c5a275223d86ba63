"""The pure parts of the pages (``mergebot.web.present`` and ``session``): where a login may send a visitor,
same-origin and CSRF checks, the landed filter, the tree's nesting and the formatting of times and sizes.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from mergebot.web import present, session


def test_safe_next_keeps_visitors_on_this_site() -> None:
    assert present.safe_next("/ui/queue?x=1") == "/ui/queue?x=1"
    for bad in ("//evil.example", "https://evil.example/", "/\\evil.example", "ui/landed", "", None, "/ui\r\nx"):
        assert present.safe_next(bad) == "/ui/landed", bad


def test_same_origin_and_csrf() -> None:
    own = "http://bot:8470"
    assert session.same_origin(own, "http://bot:8470", None)
    assert session.same_origin(own, None, "http://bot:8470/ui/queue")
    assert not session.same_origin(own, "null", "http://bot:8470/ui/queue")  # Origin decides when sent
    assert not session.same_origin(own, "http://bot:8471", None)
    assert not session.same_origin(own, None, "http://bot:8470.evil.example/")
    assert not session.same_origin(own, None, None)
    a, b = session.csrf_token("mb_a"), session.csrf_token("mb_b")
    assert a != b and len(a) == 64 and session.csrf_matches(a, a) and not session.csrf_matches(a, b)
    assert not session.csrf_matches(a, None) and not session.csrf_matches(a, "")


def test_landed_filter_parsing() -> None:
    f, errors = present.parse_landed_filter({"repo": "app", "agent": "ann", "subtask": "12", "since": "2025-01-02",
                                             "until": "2025-01-31", "before": "99"})
    assert errors == [] and f == present.LandedFilter("app", "ann", 12, date(2025, 1, 2), date(2025, 1, 31), 99)
    assert present.link("/ui/landed", **f.params(before=5)) == (
        "/ui/landed?repo=app&agent=ann&subtask=12&since=2025-01-02&until=2025-01-31&before=5")
    _, errors = present.parse_landed_filter({"repo": "a b", "subtask": "-1", "since": "2025-02-01",
                                             "until": "2025-01-01"})
    assert len(errors) == 3 and any("since is after until" in e for e in errors)


def test_nest_and_formatting() -> None:
    def row(i: int, path: list[int], children: int) -> dict[str, Any]:
        return {"id": i, "title": f"n{i}", "status": "ready", "owner": None, "depth": len(path), "path": path,
                "children": children, "children_landed": 0, "deps": [], "other_deps": 0, "child_deps": children,
                "dependents": 0}

    top = present.nest([row(1, [1], 2), row(2, [1, 2], 0), row(3, [1, 3], 5), row(4, [4], 1)])
    assert [n.id for n in top] == [1, 4] and [c.id for c in top[0].children] == [2, 3]
    assert top[0].hidden_children == 0 and top[0].children[1].hidden_children == 5 and top[1].hidden_children == 1
    assert present.count_nodes(top) == 4
    now = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    assert present.ago(now - timedelta(seconds=5), now) == "5s"
    assert present.ago(now - timedelta(hours=3, minutes=5), now) == "3h 05m"
    assert present.duration(850) == "850 ms" and present.duration(61_500) == "1m 01s"
    assert present.size(2048) == "2.0 KiB"
    assert present.status_bar({"landed": 3, "ready": 1}) == [("ready", 1, 0.0, 25.0), ("landed", 3, 25.0, 75.0)]
    views = present.log_views({"command": "pytest", "outcome": "flaky", "log_digest": "b", "log_head": "ok",
                               "runs": {"first": {"outcome": "fail", "log_digest": "a", "log_head": "E"},
                                        "retry": {"outcome": "pass", "log_digest": "b"}}})
    assert [(v.label, v.outcome) for v in views] == [("run", "flaky"), ("first run", "fail")]
    assert present.event_data("a\nb") == "event: queue\ndata: a b\n\n"
