"""A verifier worker in a process of its own that talks to PostgreSQL directly, as the workers inside
``mergebot serve`` do: the drills cut this one process off from the database (its role may no longer log in, its
connections are terminated) while the rest of the system goes on.

    python -m tests.drills.dbworker DATABASE_URL REPOS_ROOT SLOT_DIR LEASE_SECONDS
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

from mergebot.db.connect import open_pool
from mergebot.db.database import Database
from mergebot.settings import Settings
from mergebot.verify.worker import LocalRepos, LocalSource, Worker

NAME = "partitioned-worker"


async def main(url: str, repos_root: str, slot: str, lease: float) -> None:
    settings = Settings(database_url=url, pool_min_size=1, pool_max_size=2)
    pool = await open_pool(url, settings)
    db = Database(pool)
    db.jobs.lease_seconds = lease
    worker = Worker(LocalSource(db.jobs, NAME), LocalRepos(Path(repos_root)), Path(slot), sandbox="none",
                    heartbeat_every=lease / 4, poll=0.2)
    await worker.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
