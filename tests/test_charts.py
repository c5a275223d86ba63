"""The charts page against a real PostgreSQL: landings, runs and candidates placed at known times in the last
hour, and every bar and point of every chart read back from the SVG and compared with what was placed. The
pure parts (the window's alignment, the y axis) are tested directly at the end.
"""

from __future__ import annotations

import itertools
import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mergebot.db.database import Database
from mergebot.web import charts, timeline
from tests.support.site import Site

MARK = re.compile(r'<(rect|circle) class="(?:bar|point) ([a-z0-9-]+)"[^>]* data-t="([^"]+)" data-v="([^"]+)"')


def marks(html: str, chart: str) -> list[tuple[str, str, datetime, float]]:
    """(kind, series, bucket start, value) of every bar and point of one chart."""
    svg = html.split(f'id="chart-{chart}"', 1)[1].split("</svg>", 1)[0]
    return [(k, s, datetime.fromisoformat(t), float(v)) for k, s, t, v in MARK.findall(svg)]


async def _at(owner: Database, sql: str, *args: object) -> None:
    """Times set by hand, as the database's owner (the app's role may not rewrite history)."""
    async with owner.pool.connection() as conn:
        await conn.execute(sql, args)


async def test_every_mark_is_what_the_database_holds(site: Site, db: Database) -> None:
    since, _, step = charts.window("hour", datetime.now(UTC))
    late, early = since + timedelta(minutes=52.5), since + timedelta(minutes=27.5)  # buckets 10 and 5 of 12
    # three landings: two late (pushed 60 s and 120 s before), one early (30 s)
    for who, when, waited in (("ann", late, 60), ("bob", late, 120), ("ann", early, 30)):
        _, cand, landed = await site.land(who, f"work {waited}")
        await _at(db, "UPDATE landed SET landed_at = %s WHERE id = %s", when, landed)
        await _at(db, "UPDATE candidates SET queued_at = %s, started_at = %s, finished_at = %s WHERE id = %s",
                  when - timedelta(seconds=waited), when - timedelta(seconds=5), when, cand)
    # runs: late, a failure and its passing retry (flaky) and two passes; early, a failed base check and a pass
    # (the window queued the candidate runs, 3 and 4 wide late, 2 wide early)
    for purpose, outcome, when, width in (("candidate", "fail", late, 3), ("retry", "pass", late, None),
                                          ("candidate", "pass", late, 4), ("candidate", "pass", late, 3),
                                          ("base", "fail", early, None), ("candidate", "pass", early, 2)):
        job = await site.db.jobs.enqueue_job(repo="app", commit_sha="c" * 40, command="pytest -q", timeout_s=60,
                                             purpose=purpose, window_width=width)
        await _at(db, "UPDATE verify_jobs SET status = 'done', outcome = %s, started_at = %s, finished_at = %s, "
                  "created_at = %s WHERE id = %s", outcome, when - timedelta(seconds=3), when,
                  when - timedelta(seconds=4), job.id)
    # one candidate waits from minute 20 on; one was pushed at minute 42 and is verified from minute 42.5 on
    for title, queued, started in (("waits", 20.0, None), ("in flight", 42.0, 42.5)):
        sid = await site.claimed("bob", title)
        pushed = await site.db.landing.enqueue(superseded="newer", repo="app", subtask_id=sid, claim_version=1,
                                             owner_id=site.agents["bob"].id, sha=f"{sid + 99:040x}",
                                             ref=f"refs/heads/subtasks/{sid}/v1")
        await _at(db, "UPDATE candidates SET queued_at = %s, started_at = %s, status = %s WHERE id = %s",
                  since + timedelta(minutes=queued), started and since + timedelta(minutes=started),
                  "verifying" if started else "queued", pushed.id)

    await site.login("rita")
    r = await site.get("/ui/charts", span="hour")
    assert r.status_code == 200
    html = r.text
    assert 'id="total-landings">3<' in html
    bucket = [since + i * step for i in range(12)]
    # landings are counted per bucket and titled with its width: one landing in five minutes is 1 per 5 minutes,
    # never 12 per hour; the page's hourly figure is the window's count over its hours
    assert sorted(marks(html, "landings")) == [("rect", "landed", bucket[5], 1), ("rect", "landed", bucket[10], 2)]
    assert "<h2>Landings per 5 minutes</h2>" in html and 'id="landing-rate">3.0<' in html
    day = (await site.get("/ui/charts", span="day")).text
    assert "<h2>Landings per hour</h2>" in day and [v for *_, v in marks(day, "landings")] in ([3], [1, 2])
    assert 'id="landing-rate">0.1<' in day  # 3 in 24 hours
    # every axis has a few round ticks and its unit
    for key, unit in (("landings", "landings"), ("wait", "seconds"), ("depth", "candidates"), ("failures", "runs"),
                      ("runs", "runs per landing"), ("window", "runs at once")):
        drawing = html.split(f'id="chart-{key}"', 1)[1].split("</svg>", 1)[0]
        assert f'data-unit="{unit}"' in drawing and '<text class="unit"' in drawing and f">{unit}</text>" in drawing
        assert ">time (UTC)</text>" in drawing
        ticks = [float(v) for v in re.findall(r'<text class="tick y"[^>]* data-v="([^"]+)"', drawing)]
        assert 3 <= len(ticks) <= 6 and ticks[0] == 0, (key, ticks)
        assert ticks == charts.ticks(max(v for *_, v in marks(html, key)), key not in ("wait", "runs")), key
    wait = html.split('id="chart-wait"', 1)[1].split("</svg>", 1)[0]
    assert re.findall(r'class="tick y"[^>]*>([^<]+)<', wait) == ["0", "25", "50", "75", "100", "125"]  # p95 117 s
    assert sorted(marks(html, "wait")) == [("circle", "p50", bucket[5], 30), ("circle", "p50", bucket[10], 90),
                                            ("circle", "p95", bucket[5], 30), ("circle", "p95", bucket[10], 117)]
    depth = marks(html, "depth")
    assert len(depth) == 24  # a point at every bucket's end for both series, zeros included
    waiting = {t: v for _, s, t, v in depth if s == "waiting"}
    in_flight = {t: v for _, s, t, v in depth if s == "in-flight"}
    # bucket i ends at minute 5(i+1): the waiting one counts from bucket 3 on, the one in flight from bucket 8
    # (pushed at minute 42 and started at 42.5, it never waited at a bucket's end)
    assert waiting == {b: float(i >= 3) for i, b in enumerate(bucket)}
    assert in_flight == {b: float(i >= 8) for i, b in enumerate(bucket)}
    assert sorted(marks(html, "failures")) == [("rect", "failed", bucket[10], 1), ("rect", "flaky", bucket[10], 1),
                                                ("rect", "pre-existing", bucket[5], 1)]
    assert sorted(marks(html, "runs")) == [("circle", "runs", bucket[5], 2), ("circle", "runs", bucket[10], 2)]
    assert sorted(marks(html, "window")) == [("circle", "width", bucket[5], 2), ("circle", "width", bucket[10], 4)]

    # the queue page draws the last hour's depth, landings and failures the same way, and updates them live
    for path in ("/ui/queue", "/ui/queue/live"):
        queue = (await site.get(path)).text
        assert [k for k in ("depth", "landings", "failures", "wait", "runs", "window")
                if f'id="chart-{k}"' in queue] == ["depth", "landings", "failures"]
        for k in ("depth", "landings", "failures"):
            assert marks(queue, k) == marks(html, k), (path, k)

    # another window, a repository filter, and bad input told plainly
    assert len(marks((await site.get("/ui/charts", span="week")).text, "depth")) == 2 * 28
    assert marks((await site.get("/ui/charts", span="hour", repo="app")).text, "landings")
    bad = await site.get("/ui/charts", span="year", repo="nope")
    assert bad.status_code == 200
    assert "span must be one of hour, day, week" in bad.text and "repo must be one of app" in bad.text


RUN = re.compile(r'<a href="([^"]+)"><rect class="run purpose-([a-z_]+) outcome-([a-z]+)"[^>]* data-job="(\d+)"')


async def test_the_timeline_packs_runs_into_worker_slots(site: Site, db: Database) -> None:
    now = datetime.now(UTC)
    _, cand, _ = await site.land("ann", "timed")
    placed = {}
    # worker-a runs two at once (two slots; the first began before the window), then one more in its first slot;
    # worker-b runs one, still going;
    # one run ended two hours ago and is not in the last hour
    for name, purpose, outcome, start, end, candidate in (
            ("worker-a", "candidate", "pass", 70, 30, cand), ("worker-a", "retry", "fail", 45, 35, None),
            ("worker-a", "base", "pass", 25, 20, None), ("worker-b", "candidate", None, 10, None, cand),
            ("worker-b", "candidate", "pass", 130, 125, cand)):
        job = await site.db.jobs.enqueue_job(repo="app", commit_sha="c" * 40, command="pytest -q", timeout_s=60,
                                             purpose=purpose, candidate_id=candidate)
        await _at(db, "UPDATE verify_jobs SET status = %s, outcome = %s, worker_name = %s, started_at = %s, "
                  "finished_at = %s, lease_expires_at = %s WHERE id = %s", "running" if end is None else "done",
                  outcome, name, now - timedelta(minutes=start), end and now - timedelta(minutes=end),
                  now + timedelta(minutes=5) if end is None else None, job.id)
        placed[job.id] = (purpose, outcome or "running", candidate)
    await site.login("rita")
    html = (await site.get("/ui/timeline", span="hour")).text
    bars = {int(j): (href, p, o) for href, p, o, j in RUN.findall(html)}
    in_hour = {j: v for j, v in placed.items() if v[0] != "candidate" or v[1] != "pass" or j == min(placed)}
    assert bars.keys() == in_hour.keys()
    for j, (purpose, outcome, candidate) in in_hour.items():
        assert bars[j] == (f"/ui/candidates/{cand}/log" if candidate else f"/ui/jobs/{j}/log", purpose, outcome)
    assert re.findall(r'data-worker="([^"]+)" data-slot="(\d)"', html) == [("worker-a", "1"), ("worker-a", "2"),
                                                                           ("worker-b", "1")]
    assert 'id="run-count">4<' in html
    assert re.findall(r"busy (\d+)%", html) == ["58", "17", "17"]  # 30 + 5, 10 and 10 minutes of the hour
    assert 'id="fitted"' not in html  # a run began before the window: the drawing is the whole hour
    # the legend names every colour a bar can have, the grey runs and the faint wait line included
    key = html.split('id="timeline-key"', 1)[1].split("</p>", 1)[0]
    assert re.findall(r'data-key="([a-z]+)"', key) == ["candidate", "retry", "main", "bisect", "other", "wait",
                                                       "fail", "running", "cancelled"]
    assert "in grey (acceptance tests, held-out checks" in key and "waiting for a free worker" in key
    assert re.findall(r'class="lane-name"[^>]*>([^<]+)<title>([^<]+)</title>', html) == [
        ("worker-a · slot 1", "worker-a"), ("worker-a · slot 2", "worker-a"), ("worker-b · slot 1", "worker-b")]
    assert len(RUN.findall((await site.get("/ui/timeline", span="day")).text)) == 5


def test_lanes_never_overlap_and_reuse_a_free_slot() -> None:
    t = datetime(2026, 12, 2, tzinfo=UTC)

    def run(i: int, worker: str, a: int, b: int) -> dict[str, object]:
        return {"id": i, "worker_name": worker, "started_at": t + timedelta(seconds=a),
                "finished_at": t + timedelta(seconds=b)}

    rows = timeline.lanes([run(1, "w", 0, 10), run(2, "w", 5, 20), run(3, "w", 10, 15), run(4, "v", 0, 99),
                           run(5, "w", 21, 30)])
    assert [(lane.worker, lane.slot, [r["id"] for r in lane.runs]) for lane in rows] == [
        ("v", 1, [4]), ("w", 1, [1, 3, 5]), ("w", 2, [2])]
    assert rows[1].busy(t, t + timedelta(seconds=30)) == 24 / 30


def test_slots_are_labelled_by_machine_and_slot() -> None:
    """A worker's name ("host/pid/slot", an HTTP worker's with its agent in front) becomes "worker host · slot
    N", N counting from 1 per machine across its processes, in natural order (slot 10 after slot 2)."""
    t = datetime(2026, 12, 2, tzinfo=UTC)
    names = ["vm/14894/10", "vm/14894/0", "vm/14894/1", "vm/20000/0", "ci:box/7/0", "(unnamed worker)"]
    rows = timeline.lanes([{"id": i, "worker_name": n if n != "(unnamed worker)" else None, "started_at": t,
                            "finished_at": t + timedelta(seconds=1), "outcome": "pass", "status": "done",
                            "purpose": "baseline", "candidate_id": None} for i, n in enumerate(names)])
    assert [lane.worker for lane in rows] == ["(unnamed worker)", "ci:box/7/0", "vm/14894/0", "vm/14894/1",
                                              "vm/14894/10", "vm/20000/0"]
    labels = timeline.labels(rows)
    assert labels == ["(unnamed worker) · slot 1", "worker ci on box · slot 1", "worker vm · slot 1",
                      "worker vm · slot 2", "worker vm · slot 3", "worker vm · slot 4"]
    drawn = timeline.svg(rows, t, t + timedelta(seconds=2))
    assert not re.search(r"vm/\d+/\d+ ·", drawn) and "worker vm · slot 3<title>vm/14894/10</title>" in drawn


def test_a_burst_of_runs_fills_the_timeline() -> None:
    until = datetime(2026, 12, 2, 10, tzinfo=UTC)
    since = until - timedelta(hours=1)
    burst = [{"started_at": until - timedelta(seconds=s)} for s in (95, 60, 30)]
    start = timeline.fit(burst, since, until)
    assert start == until - timedelta(seconds=100)  # a twentieth of what is drawn before the first run
    assert timeline.fit([*burst, {"started_at": since - timedelta(minutes=1)}], since, until) == since
    assert timeline.fit([{"started_at": since + timedelta(minutes=1)}], since, until) == since  # no room for a margin
    assert timeline.fit([], since, until) == since
    assert "10:00:00" in timeline.svg(timeline.lanes([]), start, until)  # seconds on a short drawing's clock


def test_the_window_is_aligned_and_the_axis_is_round() -> None:
    now = datetime(2026, 12, 2, 10, 7, 30, tzinfo=UTC)
    assert charts.window("hour", now) == (datetime(2026, 12, 2, 9, 10, tzinfo=UTC),
                                          datetime(2026, 12, 2, 10, 10, tzinfo=UTC), timedelta(minutes=5))
    since, until, step = charts.window("week", now)
    assert until - since == timedelta(days=7) and (until - since) / step == 28 and until >= now
    assert [charts.ticks(v)[-1] for v in (0, 0.3, 1, 3, 7, 12, 250, 999)] == [2, 2, 2, 3, 8, 15, 250, 1000]
    assert charts.ticks(0.3, whole=False) == [0, 0.1, 0.2, 0.3] and charts.ticks(7) == [0, 2, 4, 6, 8]
    assert charts.ticks(2) == [0, 1, 2] and charts.ticks(2, whole=False) == [0, 0.5, 1, 1.5, 2]
    for top in (0.04, 0.3, 1, 1.7, 3, 7, 12, 117, 999, 12345):  # at most five round steps, the top covered
        for whole in (True, False):
            t = charts.ticks(top, whole)
            step = t[1]
            assert 3 <= len(t) <= charts.MOST_TICKS + 1 and t[-1] >= top and (t[-2] < top or len(t) == 3)
            assert all(math.isclose(b - a, step) for a, b in itertools.pairwise(t))
            assert step / 10 ** math.floor(math.log10(step)) in (1, 2, 2.5, 5) and (step >= 1 or not whole)
    assert [charts.every(timedelta(minutes=m)) for m in (5, 60, 360)] == ["5 minutes", "hour", "6 hours"]
    empty = charts.svg(charts.charts([], timedelta(hours=1))[0], [])
    assert empty.startswith("<svg") and 'class="bar' not in empty and "circle" not in empty


def test_a_wait_line_lies_beneath_the_bars_it_crosses() -> None:
    """Run 2 was asked for while run 1 ran in the same lane: its faint wait line crosses run 1's bar, and is drawn
    before every bar of the lane (and takes no clicks), so a click on run 1's bar opens run 1's log (CI once timed
    out clicking a bar a later wait line covered)."""
    t = datetime(2026, 12, 2, tzinfo=UTC)

    def run(i: int, asked: int, a: int, b: int) -> dict[str, object]:
        return {"id": i, "worker_name": "w", "created_at": t + timedelta(seconds=asked), "candidate_id": i,
                "started_at": t + timedelta(seconds=a), "finished_at": t + timedelta(seconds=b),
                "outcome": "pass", "status": "done", "purpose": "candidate"}

    rows = timeline.lanes([run(1, 0, 0, 10), run(2, 2, 10, 20), run(3, 12, 20, 30)])
    assert len(rows) == 1
    drawn = str(timeline.svg(rows, t, t + timedelta(seconds=30)))
    waits = [m.start() for m in re.finditer(r'<rect class="wait"', drawn)]
    bars = [m.start() for m in re.finditer(r'<rect class="run', drawn)]
    assert len(waits) == 2 and len(bars) == 3 and max(waits) < min(bars)
    css = (Path(timeline.__file__).parent / "static" / "pages.css").read_text()
    assert re.search(r"svg\.timeline \.wait \{[^}]*pointer-events: none", css)
