"""``/metrics``: counters read from the database at scrape time, behind a token. The numbers must move after
real claims, lease expiries, verify runs and deliveries (in process), and after a real landing, a real push
refusal and a real conflict (end to end, with the real server and git)."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mergebot import agent, cli
from mergebot.api import create_app
from mergebot.api.metrics import BUCKETS, DatabaseCollector
from mergebot.auth import Role
from mergebot.cli import render
from mergebot.db.database import Database
from mergebot.db.views import Snapshot
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.rules import Rules
from mergebot.settings import Settings
from tests.support.bot import Fleet, commit, git, make_project

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@contextlib.contextmanager
def kept_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def parse(text: str) -> Samples:
    """Every sample of an exposition, by name and labels (the official parser: the format must be valid)."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


# -- rendering, without a database -----------------------------------------------------------------------------


def test_families_render_a_snapshot() -> None:
    snap = Snapshot({
        "metric_subtasks": [{"status": "ready", "n": 2, "claims": 0}, {"status": "running", "n": 1, "claims": 3}],
        "metric_holders": [{"agents": 1}],
        "metric_landings": [{"repo": "demo", "result": "flaky", "n": 4}],
        "metric_events": [{"kind": "push_refused", "reason": "stale_claim", "n": 2},
                          {"kind": "candidate_rejected", "reason": "conflict", "n": 1},
                          {"kind": "lease_expired", "reason": "failed", "n": 5}],
        "metric_verify_runs": [{"purpose": "candidate", "outcome": "pass", "n": 2, "seconds": 7.5},
                               {"purpose": "candidate", "outcome": "fail", "n": 1, "seconds": 100.0}],
        "metric_verify_buckets": [{"purpose": "candidate", "le": le, "n": 0 if le < 5 else 2 if le < 100 else 3}
                                  for le in BUCKETS],
        "metric_verify_expiries": [{"n": 6}],
        "metric_queue_depth": [{"repo": "demo", "status": "queued", "n": 7}],
        "metric_webhook_deliveries": [{"forge": "github", "event": "push", "outcome": "accepted", "n": 9}],
    }, seconds=0.25)
    collector = DatabaseCollector()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    assert generate_latest(registry) == b""  # nothing before the first snapshot
    collector.snapshot = snap
    s = parse(generate_latest(registry).decode())
    assert value(s, "mergebot_claims_total") == 3
    assert value(s, "mergebot_subtasks", status="ready") == 2
    assert value(s, "mergebot_agents_holding_claims") == 1
    assert value(s, "mergebot_landings_total", repo="demo", result="flaky") == 4
    assert value(s, "mergebot_refusals_total", stage="push", reason="stale_claim") == 2
    assert value(s, "mergebot_refusals_total", stage="landing", reason="conflict") == 1
    assert value(s, "mergebot_lease_expiries_total", lease="subtask", outcome="failed") == 5
    assert value(s, "mergebot_lease_expiries_total", lease="verify_job", outcome="expired") == 6
    assert value(s, "mergebot_verify_runs_total", purpose="candidate", outcome="fail") == 1
    assert value(s, "mergebot_verify_duration_seconds_bucket", purpose="candidate", le="2.5") == 0
    assert value(s, "mergebot_verify_duration_seconds_bucket", purpose="candidate", le="10.0") == 2
    assert value(s, "mergebot_verify_duration_seconds_bucket", purpose="candidate", le="+Inf") == 3
    assert value(s, "mergebot_verify_duration_seconds_count", purpose="candidate") == 3
    assert value(s, "mergebot_verify_duration_seconds_sum", purpose="candidate") == 107.5
    assert value(s, "mergebot_queue_depth", repo="demo", status="queued") == 7
    assert value(s, "mergebot_webhook_deliveries_total", forge="github", event="push") == 9
    assert value(s, "mergebot_webhook_deliveries_by_outcome", forge="github", event="push", outcome="accepted") == 9
    assert value(s, "mergebot_verifier_seconds_total", purpose="candidate", outcome="fail") == 100.0
    assert value(s, "mergebot_scrape_seconds") == 0.25


def test_each_app_has_its_own_registry() -> None:
    a, b = create_app(Settings()), create_app(Settings())
    assert a.state.services.metrics is a.state.services.metrics
    assert a.state.services.metrics.registry is not b.state.services.metrics.registry


# -- in process: the numbers move --------------------------------------------------------------------------------


class Scraper:
    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.db: Database = client.app.state.services.db  # type: ignore[attr-defined]
        self.tokens: dict[str, str] = {}

    def run(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return self.client.portal.call(functools.partial(fn, *args, **kw))  # type: ignore[union-attr]

    def add(self, name: str, role: Role) -> int:
        agent, self.tokens[name] = self.run(self.db.agents.add_agent, name=name, role=role)
        return int(agent.id)

    def scrape(self, who: str = "rita") -> Samples:
        r = self.client.get("/metrics", headers={"Authorization": f"Bearer {self.tokens[who]}"})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/plain")
        return parse(r.text)


@pytest.fixture
def scraper(settings: Settings, tmp_path: Path) -> Iterator[Scraper]:
    with TestClient(create_app(settings, run_recovery=False, run_queue=False)) as client:
        s = Scraper(client)
        for name, role in (("ann", Role.AGENT), ("bob", Role.AGENT), ("rita", Role.REVIEWER)):
            s.add(name, role)
        s.run(add_repo, s.db, repos_root(settings.data_dir), name="demo",
              source=str(make_project(tmp_path / "src")), rules=Rules.of(verifier_command="true"))
        yield s


def test_metrics_need_a_token(scraper: Scraper) -> None:
    r = scraper.client.get("/metrics")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "mergebot_" not in r.text
    bad = scraper.client.get("/metrics", headers={"Authorization": "Bearer mb_not-a-token"})
    assert bad.status_code == 401
    scraper.scrape("rita")  # a reviewer may scrape
    scraper.scrape("ann")


def test_openmetrics_when_asked(scraper: Scraper) -> None:
    r = scraper.client.get("/metrics", headers={"Authorization": f"Bearer {scraper.tokens['rita']}",
                                                "Accept": "application/openmetrics-text; version=1.0.0"})
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.rstrip().endswith("# EOF")


def test_claims_lease_expiries_verify_runs_and_deliveries_move_the_numbers(scraper: Scraper) -> None:
    s = scraper
    before = s.scrape()
    for title in ("one", "two"):
        s.run(s.db.subtasks.create_subtask, actor_id=None, title=title)
    r = s.client.post("/api/v1/subtasks/claim", headers={"Authorization": f"Bearer {s.tokens['ann']}"})
    assert r.status_code == 200
    after_claim = s.scrape()
    assert value(after_claim, "mergebot_claims_total") == value(before, "mergebot_claims_total") + 1
    assert value(after_claim, "mergebot_subtasks", status="running") == 1
    assert value(after_claim, "mergebot_agents_holding_claims") == 1

    # bob claims with a lease that runs out at once; the recovery pass takes it back
    short = Database(s.db.pool, lease_seconds=0.01)
    bob = s.run(s.db.agents.agent_by_name, "bob")
    assert s.run(short.subtasks.claim, agent_id=bob.id) is not None
    time.sleep(0.05)
    assert [r["status"] for r in s.run(s.db.subtasks.recover_expired, grace_seconds=0)] == ["ready"]

    # a verify job runs to the end; a signed delivery is recorded and answered
    job = s.run(s.db.jobs.enqueue_job, repo="demo", commit_sha="a" * 40, command="true", timeout_s=60,
                purpose="candidate")
    claimed = s.run(s.db.jobs.claim_job, worker_id=None, worker_name="w")
    assert claimed.id == job.id
    s.run(s.db.jobs.finish_job, job_id=job.id, worker_id=None, claim_version=claimed.claim_version, outcome="pass",
          result={"outcome": "pass"})
    forge = s.db.forge
    state, row = s.run(forge.begin_delivery, forge="github", delivery_id="d-1", event="push", body_sha256="0" * 64)
    assert state == "new"
    s.run(forge.finish_delivery, forge="github", delivery_id="d-1", attempt=row.attempts, ok=True, http_status=202,
          outcome="ignored: not a subtask branch", repo="demo")

    after = s.scrape()
    assert value(after, "mergebot_claims_total") == value(before, "mergebot_claims_total") + 2
    assert value(after, "mergebot_lease_expiries_total", lease="subtask", outcome="ready") == 1
    assert value(after, "mergebot_verify_runs_total", purpose="candidate", outcome="pass") == 1
    assert value(after, "mergebot_verify_duration_seconds_count", purpose="candidate") == 1
    assert value(after, "mergebot_verify_duration_seconds_bucket", purpose="candidate", le="1.0") == 1
    assert value(after, "mergebot_webhook_deliveries_total", forge="github", event="push") == 1
    assert value(after, "mergebot_webhook_deliveries_by_outcome", forge="github", event="push",
                 outcome="accepted") == 1
    assert value(after, "mergebot_queue_depth", repo="demo", status="queued") == 0
    assert value(after, "mergebot_subtasks", status="ready") == 1


def test_a_run_of_exactly_a_bound_s_length_is_in_that_bound_s_bucket(scraper: Scraper) -> None:
    """Each finished run is counted once, when it ends, in its (purpose, outcome, bucket) total; each bucket is
    the runs that took at most its bound, a run of exactly 1 s or 2.5 s included, as Prometheus's ``le`` says. The
    database's bounds are the exporter's."""
    s = scraper
    lengths = [0.2, 1.0, 1.000001, 2.5, 3.0, 4000.0]  # timestamps are to the microsecond

    async def runs() -> list[float]:
        async with s.db.pool.connection() as conn:
            for seconds in lengths:  # as a worker's result finishes a run: status, start and end at once
                await conn.execute(
                    "INSERT INTO verify_jobs (repo, commit_sha, command, timeout_s, purpose, status, outcome, "
                    "started_at, finished_at) VALUES ('demo', %s, 'true', 60, 'manual', 'done', 'pass', now(), "
                    "now() + make_interval(secs => %s))", ("c" * 40, seconds))
            cur = await conn.execute("SELECT metric_bounds()")
            row = await cur.fetchone()
            assert row is not None
            return list(row[0])
    assert s.run(runs) == list(BUCKETS)
    got = s.scrape()
    for le in BUCKETS:
        assert value(got, "mergebot_verify_duration_seconds_bucket", purpose="manual", le=str(le)) == \
            sum(1 for x in lengths if x <= le), le
    assert value(got, "mergebot_verify_duration_seconds_count", purpose="manual") == len(lengths)
    assert abs(value(got, "mergebot_verifier_seconds_total", purpose="manual", outcome="pass") - sum(lengths)) < 1e-3


# -- end to end: a real landing, a real push refusal, a real conflict ---------------------------------------------


async def test_landing_refusal_and_conflict_move_the_numbers(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    rita = fleet.client("rita")
    before = parse(rita.metrics())
    await fleet.db.subtasks.create_subtask(actor_id=None, title="one")
    await fleet.db.subtasks.create_subtask(actor_id=None, title="two")
    _, ann_wt = fleet.start("ann")
    bob_claim, bob_wt = fleet.start("bob")
    commit(ann_wt, {"notes.txt": "line 1\nANN\nline 3\n"})
    assert agent.push(fleet.client("ann"), ann_wt, wait=60, progress=False)["status"] == "landed"
    commit(bob_wt, {"ci/check.sh": "exit 0\n"})  # a protected path: refused at push time
    out = git(["push", "origin", f"HEAD:refs/heads/{bob_claim.branch}"], bob_wt, check=False)
    assert out.returncode != 0
    git(["reset", "-q", "--hard", "HEAD~1"], bob_wt)
    commit(bob_wt, {"notes.txt": "line 1\nBOB\nline 3\n"})  # conflicts with what ann landed
    assert agent.push(fleet.client("bob"), bob_wt, wait=60, progress=False)["status"] == "rejected"

    after = parse(rita.metrics())
    assert value(after, "mergebot_claims_total") == value(before, "mergebot_claims_total") + 2
    assert value(after, "mergebot_landings_total", repo="demo", result="pass") == 1
    assert value(after, "mergebot_refusals_total", stage="push", reason="protected_path") == 1
    assert value(after, "mergebot_refusals_total", stage="landing", reason="conflict") == 1
    assert value(after, "mergebot_verify_runs_total", purpose="candidate", outcome="pass") >= 1
    assert value(after, "mergebot_verify_duration_seconds_count", purpose="candidate") >= 1
    assert value(after, "mergebot_queue_depth", repo="demo", status="queued") == 0

    # the queue view names both refusals, newest first, with their reasons
    view = rita.queue_view(repo="demo")
    assert [(r["kind"], r["reason"]) for r in view["refusals"]] == [("candidate_rejected", "conflict"),
                                                                     ("push_refused", "protected_path")]
    assert "notes.txt" in view["refusals"][0]["message"] and view["refusals"][1]["actor"] == "bob"
    text = render.render_queue(view)
    assert "RECENT REFUSALS" in text and "conflict" in text and "protected_path" in text

    # and the CLI reads the same server: landed by agent and age, the status summary
    with kept_logging():  # the CLI configures logging for its process; the test session keeps its own
        cli.main(["landed", "--server", fleet.bot.url, "--token", fleet.tokens["rita"], "--agent", "ann",
                  "--since", "1h", "--json"])
        landed = json.loads(capsys.readouterr().out)["landed"]
        cli.main(["status", "--server", fleet.bot.url, "--token", fleet.tokens["rita"]])
        shown = capsys.readouterr().out
    assert [(r["owner"], r["repo"]) for r in landed] == [("ann", "demo")]
    assert "landed" in shown and "1 agent(s) hold 1 claim(s):" in shown and "bob" in shown
