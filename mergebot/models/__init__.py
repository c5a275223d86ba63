"""Plain records the stores return and the landing path hands them. No behaviour beyond building themselves
from a row (``FromRow``) or from the JSON they are stored as.

Every table the stores read has its record here, so that ``mergebot.db`` and the layers above it share one
vocabulary without importing each other: agents, subtasks and their handles, repositories, candidates, landing
intents and their evidence, landed rows, verify jobs, the forge's deliveries and status outbox.
"""

from __future__ import annotations

from mergebot.models.base import *  # noqa: F403
from mergebot.models.jobs import *  # noqa: F403
from mergebot.models.landing import *  # noqa: F403
from mergebot.models.work import *  # noqa: F403
