"""The recovery loop: hands back subtasks whose owners went silent.

Every ``interval`` seconds it returns running subtasks (and verify jobs) whose lease expired more than
``grace`` seconds ago
to ``ready`` (or ``failed`` once their attempts are spent). The query skips rows another replica is already
recovering, so any number of servers may run this loop.
"""

from __future__ import annotations

import asyncio
import logging

from mergebot.db.database import Database
from mergebot.errors import MergebotError

log = logging.getLogger(__name__)


async def recovery_loop(db: Database, *, interval: float, grace: float) -> None:
    while True:
        try:
            for row in await db.subtasks.recover_expired(grace_seconds=grace):
                log.info("lease lost: subtask %s (claim version %s, owner %s) is now %s",
                         row["id"], row["claim_version"], row["previous_owner_id"], row["status"])
            for row in await db.jobs.recover_jobs(grace_seconds=grace):
                log.info("lease lost: verify job %s (claim version %s) is now %s",
                         row["id"], row["claim_version"], row["status"])
        except MergebotError as e:
            log.warning("recovery pass skipped: %s", e.message)
        await asyncio.sleep(interval)
