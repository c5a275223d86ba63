"""Every sentence anyone is told: agents, reviewers, operators and forges (bors-ng keeps all of its in
``message.ex``). Layer 0: every other part of the package may word things with it, so none keeps its own copy.

Rules:
  * The rest of the package decides and builds typed results (a ``Refusal`` code, a ``Rejection`` kind with its
    facts, a claim's state read from its row); only this package words them. A sentence says what happened and
    what to do next.
  * Nothing reads a kind back from a sentence: every verdict and every rejection's event records its kind, so a
    sentence may be reworded freely. (Only events written before they carried a kind are still counted by their
    first words, in SQL, ``refusal_reason``: they are history, and no new sentence reaches them.) What each kind
    means and what to do next is ``kinds``.
  * Pure: no I/O, nothing but strings from the facts given; it imports nothing of ``mergebot`` but itself.
  * The sentences live in submodules by audience. Agents: ``push`` (at push time), ``queue`` (a candidate's verdict
    and why it waits), ``kinds`` (each verdict kind's meaning and next step), ``claims`` (a claim gone), ``workdir``
    (their command line and worktree), ``tasks`` (a task tree's file). Reviewers: ``evidence`` (commit messages,
    reflog lines, notes on a run). Operators: ``operators`` (main's state, the database), ``admin`` (their command
    line), ``setup`` (secrets, forge configuration, the demo's errors), ``git`` (git and the remotes failing),
    ``apis`` (a forge's API failing). Forges: ``forges`` (webhook deliveries), ``commands`` (answers in a pull
    request). Any caller: ``access``, ``lookups`` (nothing by that name or id). Shared: ``words``. Every sentence
    is exported here, so ``from mergebot import messages as say`` reaches them all; ``refs`` (a subtask branch's
    name, made and parsed) is imported on its own, and so is ``demo`` (what ``mergebot demo`` narrates to a new
    user).
  * A ``raise`` elsewhere takes its sentence from here; only programming errors no user sees (a gate of no
    slots, a walk cut short and caught) keep theirs inline. ``tests/test_messages_sources.py`` holds the files
    cleaned so far to it.
"""

from __future__ import annotations

from mergebot.messages.access import *  # noqa: F403
from mergebot.messages.admin import *  # noqa: F403
from mergebot.messages.apis import *  # noqa: F403
from mergebot.messages.attest import *  # noqa: F403
from mergebot.messages.claims import *  # noqa: F403
from mergebot.messages.commands import *  # noqa: F403
from mergebot.messages.evidence import *  # noqa: F403
from mergebot.messages.forges import *  # noqa: F403
from mergebot.messages.git import *  # noqa: F403
from mergebot.messages.kinds import *  # noqa: F403
from mergebot.messages.lookups import *  # noqa: F403
from mergebot.messages.operators import *  # noqa: F403
from mergebot.messages.push import *  # noqa: F403
from mergebot.messages.queue import *  # noqa: F403
from mergebot.messages.setup import *  # noqa: F403
from mergebot.messages.tasks import *  # noqa: F403
from mergebot.messages.words import *  # noqa: F403
from mergebot.messages.workdir import *  # noqa: F403
