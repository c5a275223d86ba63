"""What ``mergebot serve`` runs behind its routes, built once per app and started by its lifespan.

``Services`` is made with the app (``create_app``) and put on ``app.state`` once; nothing is set on the app
afterwards. Its ``start`` resolves the database (embedded unless MERGEBOT_DATABASE_URL is set), applies
migrations, opens a pool whose every query runs under ``statement_timeout`` (agents drive these queries) as the
request-handling role, starts the waiter's LISTEN connection, the recovery loop and the forge status sender, and
the landing thread (``mergebot.api.landing_thread``): the merge queue, which reconciles each repository it leads
before landing anything, and the in-process verifier workers, on a loop and a pool of their own. Until it has
started, ``db`` and the other parts raise ``Unavailable``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from mergebot import messages as say
from mergebot.api.landing_thread import LandingThread, Parts
from mergebot.api.metrics import Exporter
from mergebot.auth import Role, allowed
from mergebot.db.connect import direct_url, open_pool, prepare
from mergebot.db.database import Database
from mergebot.db.roles import AppConnection, app_connection
from mergebot.errors import Unavailable
from mergebot.forge.outbox import StatusSender
from mergebot.forge.webhooks import WebhookHandler
from mergebot.git import credentials
from mergebot.git.smarthttp import GitHttp
from mergebot.landing.intake.admit import Admission
from mergebot.landing.main.repos import repos_root
from mergebot.landing.window.queue import LandingQueue
from mergebot.models import Agent
from mergebot.naps import cancel_all
from mergebot.recovery import recovery_loop
from mergebot.secrets import secret_values
from mergebot.settings import Settings
from mergebot.verify.worker import local_workers
from mergebot.web.live import LiveQueue
from verifier.mask import Masker
from verifier.sandbox import bwrap_problem

log = logging.getLogger("mergebot.api")


class Services:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = repos_root(settings.data_dir)
        self.metrics = Exporter()  # one registry per app
        self.live_queue = LiveQueue()  # the queue pages' live streams
        self.admission = Admission(settings)  # claims past a lane's capacity or an agent's cap are refused
        self.git = GitHttp(
            self.root,
            authenticate=self._git_identity,
            may_push=lambda agent: allowed(Role(agent.role), "claim"),
            repo_exists=lambda name: (self.root / f"{name}.git").is_dir(),
            hook_url=lambda: f"http://127.0.0.1:{settings.port}/internal/hooks",
            concurrency=settings.git_concurrency,
        )
        self.app_db: AppConnection | None = None  # how request handling connects (the role, and how it logs in)
        self._db: Database | None = None
        self._queue: LandingQueue | LandingThread | None = None
        self._webhooks: WebhookHandler | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._urls: list[str] = [settings.database_url]  # every database URL this server connects with
        # What the sandbox of this server's checks is, for the pages and /healthz: "bwrap", "none" (the operator
        # said so) or "refused" (bwrap is not usable here, so every check is refused until it is installed).
        self.sandbox = settings.sandbox_mode
        self.sandbox_problem: str | None = None

    async def secrets(self) -> list[str]:
        """The values no stored or sent text may show (``mergebot.secrets``): this server's environment, the
        variables each repository names, the database URLs' passwords, the GitHub App tokens it holds now."""
        return await self._secrets(self.db)

    async def _secrets(self, db: Database) -> list[str]:
        named = {n for r in await db.repos.list_repos()
                 for n in (r.webhook_secret_env, r.forge_token_env, r.github_app_key_env) if n}
        return secret_values(os.environ, named=named, urls=self._urls, values=credentials.live_tokens())

    async def masker(self) -> Masker:
        return Masker(await self.secrets())

    @property
    def db(self) -> Database:
        if self._db is None:
            raise Unavailable(say.SERVER_STARTING)
        return self._db

    @property
    def queue(self) -> LandingQueue | LandingThread:
        if self._queue is None:
            raise Unavailable(say.SERVER_STARTING)
        return self._queue

    @property
    def webhooks(self) -> WebhookHandler:
        if self._webhooks is None:
            raise Unavailable(say.SERVER_STARTING)
        return self._webhooks

    async def _git_identity(self, token: str) -> Agent | None:
        return await self.db.agents.authenticate(token)

    async def start(self, *, run_queue: bool = True, run_recovery: bool = True) -> None:
        settings = self.settings
        url = await asyncio.to_thread(prepare, settings)
        direct = direct_url(settings, url)
        self.app_db = app_db = await asyncio.to_thread(
            lambda: app_connection(direct, settings.database_app_role, url if settings.pooled else None,
                                   statement_timeout_ms=settings.statement_timeout_ms))
        self._urls = list(dict.fromkeys([settings.database_url, url, direct, app_db.url, app_db.direct_url]))
        log.info("request handling connects to the database as %s (%s)%s", app_db.role or "the owner", app_db.how,
                 "; through a transaction pooler, with LISTEN and the queue's leadership on the direct URL"
                 if settings.pooled else "")
        db = await self._database(app_db)
        await db.waiter.start()
        sender = StatusSender(db, public_url=settings.public_url or f"http://{settings.host}:{settings.port}",
                              masker=self.masker)
        queue: LandingQueue | LandingThread
        if run_queue:
            if settings.verifier_workers:
                await asyncio.to_thread(self._say_sandbox)
            queue = LandingThread(lambda: self._landing(app_db, [url, direct]))
            await queue.start()
            self._tasks.append(asyncio.create_task(sender.run(), name="mergebot-forge-statuses"))
        else:
            queue = self._new_queue(db)  # never runs: request handling's pokes and reads find it

        def poke() -> None:
            queue.poke()
            sender.poke()

        self._db, self._queue = db, queue
        self._webhooks = WebhookHandler(db, self.root, poke=poke)
        if run_recovery:
            self._tasks.append(asyncio.create_task(recovery_loop(
                db, interval=settings.recovery_interval_seconds, grace=settings.recovery_grace_seconds)))

    async def _database(self, app_db: AppConnection, *, max_size: int | None = None) -> Database:
        """A database on a new pool as the request-handling role, every query under ``statement_timeout``."""
        settings = self.settings
        pool = await open_pool(app_db.url, settings, statement_timeout_ms=settings.statement_timeout_ms,
                               options=app_db.options, max_size=max_size)
        return Database(pool, lease_seconds=settings.lease_seconds, job_lease_seconds=settings.job_lease_seconds,
                        listen_url=app_db.direct_url, duplicate_days=settings.duplicate_days)

    def _new_queue(self, db: Database) -> LandingQueue:
        settings = self.settings
        return LandingQueue(db, self.root, speculation=settings.speculation_window, batch=settings.batch_size,
                            post_land_rerun=settings.post_land_rerun, retry_failures=settings.retry_failed_checks,
                            max_passes=settings.risk_max_passes, slots=settings.verifier_workers,
                            attest_dir=settings.attest_folder)

    async def _landing(self, app_db: AppConnection, urls: list[str]) -> Parts:
        """The queue and the in-process workers, made on the landing thread's loop with a database of their own
        (``mergebot.api.landing_thread``): a pool as large as the workers and a few steps need at once."""
        settings = self.settings
        db = await self._database(app_db, max_size=max(settings.verifier_workers + 4, settings.pool_min_size))
        await db.waiter.start()
        queue = self._new_queue(db)
        workers = local_workers(db.jobs, self.root, settings.data_dir, urls, count=settings.verifier_workers,
                                sandbox=settings.sandbox_mode, heartbeat_every=settings.job_lease_seconds / 3,
                                wake_on=queue.on_job, secrets=lambda: self._secrets(db), bwrap=settings.bwrap,
                                lookup=db.repos.get_repo, attest=settings.attest_folder)
        return db, queue, workers

    def _say_sandbox(self) -> None:
        """One line at start when checks are not sandboxed: the operator's choice, or bubblewrap is missing."""
        if self.settings.sandbox_mode == "none":
            log.warning("MERGEBOT_SANDBOX=none: checks run WITHOUT a sandbox, with the whole machine in view; every "
                        "verdict and landed record says sandbox: none")
            return
        self.sandbox_problem = bwrap_problem(self.settings.bwrap)
        if self.sandbox_problem is not None:
            self.sandbox = "refused"
            log.warning("every check is refused until the sandbox works: %s (or set MERGEBOT_SANDBOX=none to run "
                        "checks with the whole machine in view)", self.sandbox_problem)

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        await cancel_all(tasks)
        if self._queue is not None:
            await self._queue.close()
        if self._db is not None:
            await self._db.close()
