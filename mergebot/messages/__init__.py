"""Every sentence anyone is told: agents, reviewers, operators and forges (bors-ng keeps all of its in
``message.ex``). Layer 0: every other part of the package may word things with it, so none keeps its own copy.

Rules:
  * The rest of the package decides and builds typed results (a ``Refusal`` code, a ``Rejection`` kind with its
    facts, a claim's state read from its row); only this package words them. A sentence says what happened and
    what to do next.
  * The first words of a rejection are stable (``conflicts with``, ``nothing to land``, ``the check``, ``the
    verifier could not run``): older rows are classified by them where no ``kind`` was recorded.
  * Pure: no I/O, nothing but strings from the facts given; it imports nothing of ``mergebot`` but itself.
  * The sentences live in submodules by audience (``push``, ``queue``, ``evidence``, ``commands``, ``claims``,
    ``access``, ``forges``, ``kinds``, and the shared ``words``); every name is exported here, so
    ``from mergebot import messages as say`` reaches them all.
"""

from __future__ import annotations

from mergebot.messages.access import *  # noqa: F403
from mergebot.messages.claims import *  # noqa: F403
from mergebot.messages.commands import *  # noqa: F403
from mergebot.messages.evidence import *  # noqa: F403
from mergebot.messages.forges import *  # noqa: F403
from mergebot.messages.kinds import *  # noqa: F403
from mergebot.messages.push import *  # noqa: F403
from mergebot.messages.queue import *  # noqa: F403
from mergebot.messages.words import *  # noqa: F403
