"""All configuration in one place, read from ``MERGEBOT_*`` environment variables or given by the caller."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MERGEBOT_", extra="ignore", populate_by_name=True)

    # Where the embedded PostgreSQL and repositories live. Ignored for the database when database_url is set.
    data_dir: Path = Path(".mergebot")
    # The landing statements' signing key and trust file (``mergebot.attest.keys``). Empty: data_dir/attest.
    # Replicas of one repository on data directories of their own point theirs at one folder, so every landing is
    # signed by a key the one trust file names.
    attest_dir: Path | None = None
    # Any PostgreSQL server; empty means "start the embedded one in data_dir". It may be a transaction pooler
    # (PgBouncer, pool_mode=transaction) in front of the server, with database_direct_url naming the server itself.
    database_url: str = ""
    # The server itself, for the connections that must not go through a transaction pooler: the queue's
    # leadership (a session's advisory lock), LISTEN/NOTIFY waits and migrations. Empty: database_url. Ignored
    # without database_url (the embedded server has no pooler in front of it).
    database_direct_url: str = ""
    # The role request handling runs as, with only the rights mergebot/db/grants.sql lists (created when the
    # URL's user may; empty: run as the URL's user).
    database_app_role: str = Field(default="mergebot_app", pattern="^([a-z_][a-z0-9_]{0,62})?$")

    host: str = "127.0.0.1"
    port: int = 8470
    # The HTTP server: uvicorn, or granian (its HTTP layer in native code; mergebot/api/http.py).
    http_server: str = Field(default="uvicorn", pattern="^(uvicorn|granian)$")
    # How forges and people reach this server: commit statuses link here. Empty: http://host:port.
    public_url: str = ""

    # Claims: a lease is renewed by heartbeats; recovery waits lease + grace before handing a subtask back.
    lease_seconds: float = Field(default=120.0, gt=0)
    recovery_grace_seconds: float = Field(default=30.0, ge=0)
    recovery_interval_seconds: float = Field(default=5.0, gt=0)

    # Agent-driven queries: bounded in time and size (the seeds' gateway limited SQL to 5 s).
    # Verifier workers inside `mergebot serve` (more run anywhere with `mergebot verifier worker`).
    verifier_workers: int = Field(default=2, ge=0)
    # Speculative landing: test up to this many queued candidates at once, each on top of the ones ahead
    # (1 is the serial queue). 0, the default: as many as the verifier slots the bot knows (its own workers and the
    # remote workers that ran a check lately), which is where speculation stops paying.
    speculation_window: int = Field(default=0, ge=0, le=64)
    # Batching: up to this many candidates verified together by one run, bisected on failure; the size used
    # adapts to the measured failure rate and, in a risk-aware repository, to each candidate's estimate
    # (1: every candidate gets its own run).
    batch_size: int = Field(default=4, ge=1, le=64)
    # A risk-aware queue takes the safer of two equal candidates first (``repo set --risk``); one passed over
    # this many times goes next, so none starves behind safer work.
    risk_max_passes: int = Field(default=4, ge=0, le=1000)
    # A new subtask that nearly matches an open one, or one that landed in this many days, is answered 409
    # duplicate (naming the landed record) unless created with allow_duplicate; 0 counts open subtasks only.
    duplicate_days: int = Field(default=30, ge=0, le=3650)
    # The post-land check on main's new head reuses the run that landed it when main moved to exactly that
    # commit and it passed (the same command on the same tree); true runs it again anyway (flakiness only).
    post_land_rerun: bool = False
    # A check that fails (or times out) is run once more on the same commit: a pass then is "flaky" and lands
    # with both runs as evidence. False trusts the first failure (a deterministic check), which saves a run per
    # failure; a run that could not judge at all (outcome "error") is still tried twice.
    retry_failed_checks: bool = True
    # How checks are confined: "bwrap" (bubblewrap; when it is not usable, checks are refused, saying how to
    # install it) or "none" (the whole machine in view: only an operator who means it sets MERGEBOT_SANDBOX=none).
    # "auto", the old default, is "bwrap". MERGEBOT_VERIFIER_SANDBOX is the old name.
    sandbox: str = Field(default="bwrap", pattern="^(auto|bwrap|none)$",
                         validation_alias=AliasChoices("MERGEBOT_SANDBOX", "MERGEBOT_VERIFIER_SANDBOX", "sandbox"))
    # The bubblewrap program (a name on PATH or a path).
    bwrap: str = "bwrap"
    job_lease_seconds: float = Field(default=30.0, gt=0)

    # Git over HTTP: at most this many git processes at once, the rest wait in order with pushes first
    # (mergebot/git/gate.py); 0 is twice the CPUs, at least 4.
    git_concurrency: int = Field(default=0, ge=0)

    statement_timeout_ms: int = Field(default=5000, gt=0)
    max_body_bytes: int = Field(default=1 << 20, gt=0)
    pool_min_size: int = Field(default=2, ge=1)
    pool_max_size: int = Field(default=20, ge=1)

    # Admission control at claim time (``mergebot.landing.intake.admission``): "on" answers a claim whose lane (a
    # repository) holds more queued and in-flight work than ``admission_factor`` windows of what its verifiers
    # clear with a typed ``capacity`` refusal; "off" admits every claim (the bench compares the two).
    admission: str = Field(default="on", pattern="^(on|off)$")
    admission_factor: float = Field(default=2.0, gt=0, le=1000)
    # ... and never while it holds fewer runs of work than this (a small team's queue is no backlog).
    admission_min_runs: float = Field(default=8.0, ge=0, le=100_000)
    # ... and lets out at least this many claims not yet pushed (rule 8; a team starting at once is not held back).
    admission_min_claims: float = Field(default=32.0, ge=0, le=100_000)
    # How long one replica reuses a lane's measurement (a fleet claiming hundreds of times a second reads it once).
    admission_cache_seconds: float = Field(default=1.0, ge=0, le=60)
    # The cap on each agent's running claims plus queued candidates (the subtasks it holds): ``ROLE=N`` sets a
    # role's default, ``NAME=N`` an agent's own (a name that is not a role's), N = 0 no cap; comma-separated,
    # e.g. "agent=4,lead=8,ann=2". A role not named has no cap.
    agent_wip: str = Field(default="agent=64,lead=256,admin=256",
                           pattern=r"^\s*([A-Za-z0-9_.@-]+\s*=\s*[0-9]+\s*(,\s*[A-Za-z0-9_.@-]+\s*=\s*[0-9]+\s*)*)?$")

    @property
    def attest_folder(self) -> Path:
        """Where the signing key and the trust file live (``attest_dir``, or the data directory's ``attest``)."""
        return self.attest_dir or self.data_dir / "attest"

    @property
    def pooled(self) -> bool:
        """Whether database_url goes through a transaction pooler (a direct URL names another way in): its
        connections then prepare no statements and pass no startup options (``mergebot.db.connect``)."""
        return bool(self.database_url and self.database_direct_url) and self.database_direct_url != self.database_url

    @property
    def sandbox_mode(self) -> str:
        """What the verifier is asked for: ``none`` only when the operator said so, else ``bwrap``."""
        return "none" if self.sandbox == "none" else "bwrap"
