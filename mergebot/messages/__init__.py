"""Every sentence an agent or a reviewer reads from the landing path and the push checks (bors-ng keeps all of
its in ``message.ex``).

Rules:
  * The rest of ``mergebot.landing`` decides and builds typed results (a ``Refusal`` code, a ``Rejection``
    kind with its facts); only this module words them. A sentence says what happened and what to do next.
  * The first words of a rejection are stable (``conflicts with``, ``nothing to land``, ``the check``, ``the
    verifier could not run``): older rows are classified by them where no ``kind`` was recorded.
  * Pure: no I/O, nothing but strings from the facts given.
  * The sentences live in submodules by audience (``push``, ``queue``, ``evidence``, ``commands``, and the shared
    ``words``); every name is exported here, so ``from mergebot import messages as say`` reaches them all.
"""

from __future__ import annotations

from mergebot.messages.commands import *  # noqa: F403
from mergebot.messages.evidence import *  # noqa: F403
from mergebot.messages.push import *  # noqa: F403
from mergebot.messages.queue import *  # noqa: F403
from mergebot.messages.words import *  # noqa: F403
