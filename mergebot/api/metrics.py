"""Prometheus metrics, read from the database when Prometheus scrapes ``/metrics``.

Rules of this module:
  * Nothing in the Python write path is instrumented. Every number is read at scrape time from the database
    (``mergebot/db/queries/metrics.sql``): from durable rows, and, for what grows with the history (runs, landings,
    lost leases), from totals its triggers keep as each happens. Counters survive restarts, agree across
    replicas, and cannot drift from what the database says happened.
  * Each app has its own ``CollectorRegistry`` (``exporter_for(app)``), never the global one, so tests and
    several apps in one process do not share state.
  * A scrape reads everything in one read-only transaction (one consistent snapshot), then renders it; the
    rendering (``families``) is pure and tested on its own.
  * A counter only counts what is fixed once it happened (a run's seconds by purpose and outcome, a delivery
    received, a lease lost), so it never goes down: Prometheus reads a fall as a restart. What is worked out
    again later (verifier seconds re-charged to rework when a subtask lands, or to thrown away by a revert) is
    ``mergebot cost`` and ``/api/v1/cost``, never a counter here; a state that changes is a gauge.

The metrics (counters end in ``_total``):
  mergebot_claims_total                       claims ever made (the sum of every subtask's claim_version)
  mergebot_landings_total{repo,result}        landed rows, by repository and verifier result (pass, flaky)
  mergebot_refusals_total{stage,reason}       pushes refused at push time (stage "push", the rule's code),
                                              candidates rejected by the queue (stage "landing": conflict,
                                              check_failed, check_timeout, disk_limit, memory_limit,
                                              verifier_error, nothing_to_land, other), forge pushes ignored
                                              and deliveries refused ("webhook")
  mergebot_lease_expiries_total{lease,outcome} subtask leases the recovery loop took back (outcome ready or
                                              failed) and verify job leases that lapsed (lease "verify_job")
  mergebot_verify_runs_total{purpose,outcome} finished verify jobs
  mergebot_verifier_seconds_total{purpose,outcome}  their wall time, claim to result
  mergebot_verify_duration_seconds{purpose}   histogram of verify jobs' wall time, claim to result
  mergebot_webhook_deliveries_total{forge,event}  signed deliveries received
  mergebot_webhook_deliveries_by_outcome{forge,event,outcome}  the same by latest outcome (gauge: a failed
                                              delivery that is redelivered and processed moves to accepted)
  mergebot_queue_depth{repo,status}           candidates queued, verifying, landing or parked (gauge)
  mergebot_unattested_commits{repo}           commits of main no landing statement explains, found by the audit
                                              of main and not yet seen by an admin (gauge; 0 after a resume)
  mergebot_unattested_findings_total{repo}    the audit's findings of moves of main around the bot
  mergebot_subtasks{status}                   subtasks by status (gauge)
  mergebot_agents_holding_claims              agents that own at least one subtask (gauge)
  mergebot_scrape_seconds                     how long this scrape's database reads took (gauge)
  mergebot_admission_backlog_seconds{lane}    a lane's queued and in-flight work in predicted verifier-seconds
  mergebot_admission_threshold_seconds{lane}  the backlog past which it refuses claims (gauge)
  mergebot_admission_capacity{lane}           the verifiers' measured capacity, in runs at once (gauge)
  mergebot_admission_admitting{lane}          1 while the lane admits claims, 0 while it refuses them (gauge)
  mergebot_admission_claims_in_flight{lane}   claims out for the lane whose work is not pushed yet (gauge)
  mergebot_claim_refusals_total{reason,lane}  claims refused: reason "capacity" (by lane) or "wip_limit" (lane "")
plus the client library's process_* and python_* metrics.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from mergebot.db.database import Database
from mergebot.db.views import Snapshot

# Verify jobs run from seconds (a lint) to the better part of an hour (a full suite with retries).
BUCKETS: tuple[float, ...] = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)

def families(snap: Snapshot) -> list[Metric]:
    """Turn a snapshot into metric families. Pure."""
    return [*_subtasks(snap), _landings(snap), _refusals(snap), _leases(snap), *_verify(snap),
            *_deliveries(snap), _queue(snap), *_unattested(snap), _seconds(snap),
            GaugeMetricFamily("mergebot_scrape_seconds", "Time the database reads of this scrape took.",
                              value=snap.seconds)]


def _subtasks(snap: Snapshot) -> Iterator[Metric]:
    claims = CounterMetricFamily("mergebot_claims", "Claims ever made (every claim bumps its subtask's "
                                 "claim_version by one).", value=sum(int(r["claims"]) for r in
                                                                      snap.of("metric_subtasks")))
    by_status = GaugeMetricFamily("mergebot_subtasks", "Subtasks by status.", labels=["status"])
    for r in sorted(snap.of("metric_subtasks"), key=lambda r: str(r["status"])):
        by_status.add_metric([r["status"]], r["n"])
    holders = snap.of("metric_holders")
    yield claims
    yield by_status
    yield GaugeMetricFamily("mergebot_agents_holding_claims", "Agents that own at least one subtask.",
                            value=holders[0]["agents"] if holders else 0)


def _landings(snap: Snapshot) -> Metric:
    m = CounterMetricFamily("mergebot_landings", "Subtasks landed on their target branch, by repository and "
                            "verifier result.", labels=["repo", "result"])
    for r in snap.of("metric_landings"):
        m.add_metric([r["repo"], r["result"]], r["n"])
    return m


STAGES = {"push_refused": "push", "candidate_rejected": "landing", "push_ignored": "webhook",
          "webhook_refused": "webhook"}


def _refusals(snap: Snapshot) -> Metric:
    m = CounterMetricFamily("mergebot_refusals", "Refusals by stage (push, landing, webhook) and reason.",
                            labels=["stage", "reason"])
    for r in snap.of("metric_events"):
        if r["kind"] in STAGES:
            m.add_metric([STAGES[r["kind"]], r["reason"]], r["n"])
    return m


def _leases(snap: Snapshot) -> Metric:
    m = CounterMetricFamily("mergebot_lease_expiries", "Leases that expired: subtasks taken back by the recovery "
                            "loop (to ready, or failed as a poison pill) and verify jobs whose worker went silent.",
                            labels=["lease", "outcome"])
    for r in snap.of("metric_events"):
        if r["kind"] == "lease_expired":
            m.add_metric(["subtask", r["reason"]], r["n"])
    expiries = snap.of("metric_verify_expiries")
    m.add_metric(["verify_job", "expired"], expiries[0]["n"] if expiries else 0)
    return m


def _seconds(snap: Snapshot) -> Metric:
    """Verifier seconds by the run's purpose and outcome, fixed when each run ends. (What they were charged to,
    which changes when a subtask lands or a landing is reverted, is ``mergebot cost``'s.)"""
    m = CounterMetricFamily("mergebot_verifier_seconds", "Verifier wall time (claim to result) of finished verify "
                            "jobs, by purpose and outcome.", labels=["purpose", "outcome"])
    for r in sorted(snap.of("metric_verify_runs"), key=lambda r: (r["purpose"], r["outcome"])):
        m.add_metric([r["purpose"], r["outcome"]], float(r["seconds"]))
    return m


def _verify(snap: Snapshot) -> Iterator[Metric]:
    runs = CounterMetricFamily("mergebot_verify_runs", "Finished verify jobs by purpose and outcome.",
                               labels=["purpose", "outcome"])
    count: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    for r in snap.of("metric_verify_runs"):
        runs.add_metric([r["purpose"], r["outcome"]], r["n"])
        count[r["purpose"]] += int(r["n"])
        total[r["purpose"]] += float(r["seconds"])
    cumulative: dict[str, dict[float, int]] = defaultdict(dict)
    for r in snap.of("metric_verify_buckets"):
        cumulative[r["purpose"]][float(r["le"])] = int(r["n"])
    hist = HistogramMetricFamily("mergebot_verify_duration_seconds", "Verify jobs' wall time from claim to "
                                 "result, by purpose.", labels=["purpose"])
    for purpose in sorted(count):
        buckets = [(str(le), cumulative[purpose].get(le, 0)) for le in BUCKETS]  # "2.5", "10.0": as the client
        hist.add_metric([purpose], [*buckets, ("+Inf", count[purpose])], sum_value=total[purpose])
    yield runs
    yield hist


def _deliveries(snap: Snapshot) -> Iterator[Metric]:
    received = CounterMetricFamily("mergebot_webhook_deliveries", "Signed forge webhook deliveries received, by "
                                   "forge and event.", labels=["forge", "event"])
    outcomes = GaugeMetricFamily("mergebot_webhook_deliveries_by_outcome", "Signed forge webhook deliveries by "
                                 "their latest outcome (accepted, refused, failed, processing).",
                                 labels=["forge", "event", "outcome"])
    total: dict[tuple[str, str], int] = defaultdict(int)
    for r in snap.of("metric_webhook_deliveries"):
        outcomes.add_metric([r["forge"], r["event"], r["outcome"]], r["n"])
        total[(r["forge"], r["event"])] += int(r["n"])
    for (forge, event), n in sorted(total.items()):
        received.add_metric([forge, event], n)
    yield received
    yield outcomes


def _queue(snap: Snapshot) -> Metric:
    m = GaugeMetricFamily("mergebot_queue_depth", "Candidates in the merge queue by repository and status.",
                          labels=["repo", "status"])
    for r in sorted(snap.of("metric_queue_depth"), key=lambda r: (r["repo"], r["status"])):
        m.add_metric([r["repo"], r["status"]], r["n"])
    return m


def _unattested(snap: Snapshot) -> Iterator[Metric]:
    commits = GaugeMetricFamily("mergebot_unattested_commits", "Commits of main that no landing statement explains "
                                "(moved around the bot), not yet seen by an admin, by repository.", labels=["repo"])
    findings = CounterMetricFamily("mergebot_unattested_findings", "The audit of main's findings of moves no landing "
                                   "statement explains, by repository.", labels=["repo"])
    for r in sorted(snap.of("metric_unattested"), key=lambda r: str(r["repo"])):
        commits.add_metric([r["repo"]], r["commits"])
        findings.add_metric([r["repo"]], r["findings"])
    yield commits
    yield findings


def admission_families(view: dict[str, Any]) -> list[Metric]:
    """Admission control's gauges per lane and the claims it refused (``Admission.view``'s record). Pure."""
    backlog = GaugeMetricFamily("mergebot_admission_backlog_seconds", "A lane's queued and in-flight candidates, in "
                                "predicted verifier-seconds.", labels=["lane"])
    threshold = GaugeMetricFamily("mergebot_admission_threshold_seconds", "The backlog past which a lane refuses "
                                  "claims.", labels=["lane"])
    capacity = GaugeMetricFamily("mergebot_admission_capacity", "The verifiers' measured capacity, in runs at "
                                 "once.", labels=["lane"])
    admitting = GaugeMetricFamily("mergebot_admission_admitting", "1 while a lane admits claims, 0 while it refuses "
                                  "them.", labels=["lane"])
    flight = GaugeMetricFamily("mergebot_admission_claims_in_flight", "Claims out for a lane whose work is not "
                               "pushed yet.", labels=["lane"])
    refusals = CounterMetricFamily("mergebot_claim_refusals", "Claims refused: for want of capacity in their lane, or "
                                   "for their agent's cap on work in progress.", labels=["reason", "lane"])
    for lane in sorted(view["lanes"], key=lambda lane: str(lane["lane"])):
        name = str(lane["lane"])
        backlog.add_metric([name], float(lane["backlog_seconds"]))
        threshold.add_metric([name], float(lane["threshold_seconds"]))
        capacity.add_metric([name], float(lane["capacity"]))
        admitting.add_metric([name], 1.0 if lane["admitting"] else 0.0)
        flight.add_metric([name], float(lane["in_flight"]))
        refusals.add_metric(["capacity", name], int(lane["refusals"]))
    refusals.add_metric(["wip_limit", ""], int(view["wip_refusals"]))
    return [backlog, threshold, capacity, admitting, flight, refusals]


class DatabaseCollector(Collector):
    """Yields the families of the latest snapshot; ``Exporter.render`` refreshes it just before each scrape."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None
        self.admission: dict[str, Any] | None = None

    def describe(self) -> Iterable[Metric]:
        return []  # nothing to read at registration; names are checked by the tests instead

    def collect(self) -> Iterable[Metric]:
        if self.snapshot is None:
            return []
        return [*families(self.snapshot), *(admission_families(self.admission) if self.admission else [])]


class Exporter:
    """One app's registry: the database collector plus the process and Python collectors."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = DatabaseCollector()
        self.registry.register(self.collector)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._lock = asyncio.Lock()

    async def render(self, db: Database, accept: str | None,
                     admission: dict[str, Any] | None = None) -> tuple[bytes, str]:
        """Read a fresh snapshot and render the registry in the format ``accept`` asks for (Prometheus text
        by default, OpenMetrics when asked). Scrapes take turns, so each renders the snapshot it read.
        ``admission``: admission control's view (``Admission.view``), read by the caller."""
        encoder, content_type = choose_encoder(accept or "")
        async with self._lock:
            self.collector.snapshot = await db.views.metrics_snapshot(list(BUCKETS))
            self.collector.admission = admission
            return encoder(self.registry), content_type
