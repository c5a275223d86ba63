"""Commands written to the bot in a pull request's comments, and who may give each. Pure.

  ``@mergebot why``          anyone who can read the pull request: its comment shows the whole verdict
  ``@mergebot retry``        the owner: verify the same commit again (``submit --again``); a lead or admin: give a
                             failed subtask another round (``mergebot retry``)
  ``@mergebot cancel``       the owner: take the waiting candidate out of the queue; a lead or admin: cancel the
                             subtask
  ``@mergebot priority N``   a lead or admin only (an owner must not move itself up the queue)
  ``@mergebot approve``      a lead, reviewer or admin (never the owner): approve the pull request's newest
                             candidate's commit, where the repository requires an approval (an approving review on
                             the forge does the same: ``mergebot.forge.sansio.to_pull_review``)

A command is a line of its own that starts with ``@mergebot``; the first such line counts. Who may give it is
``refusal``'s to say: the forge login must be linked to an agent (``mergebot agent link NAME --github LOGIN``),
except for ``why``. The answers are ``mergebot.messages``' sentences, shown in the pull request's comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mergebot import messages as say

NAMES = ("why", "retry", "cancel", "priority", "approve")
_LINE = re.compile(r"^\s*@mergebot\s+(\S+)(?:\s+(\S+))?\s*$", re.IGNORECASE | re.MULTILINE)
MANAGERS = ("lead", "admin")
APPROVERS = ("lead", "reviewer", "admin")  # ``mergebot.auth.PERMISSIONS['approve']``
PRIORITY_RANGE = range(-1000, 1001)


@dataclass(frozen=True)
class Command:
    name: str  # one of NAMES, or what was written when it is none of them
    arg: str | None = None

    @property
    def priority(self) -> int | None:
        try:
            value = int(self.arg or "")
        except ValueError:
            return None
        return value if value in PRIORITY_RANGE else None


def parse(body: str) -> Command | None:
    """The command in a comment, if it has one."""
    m = _LINE.search(body or "")
    if m is None:
        return None
    return Command(m.group(1).lower(), m.group(2))


def refusal(cmd: Command, *, login: str | None, forge: str, role: str | None, owner: bool) -> str | None:
    """Why ``login`` (whose linked agent has ``role``, None when unlinked; ``owner``: it owns the pull request's
    subtask) may not give ``cmd``; None when it may."""
    if cmd.name not in NAMES:
        return say.command_unknown(cmd.name, NAMES)
    if cmd.name == "why":
        return None
    if role is None:
        return say.command_unlinked(login, forge)
    if cmd.name == "approve":
        return None if role in APPROVERS else say.command_needs_approver("approve")
    manager = role in MANAGERS
    if cmd.name == "priority":
        if not manager:
            return say.command_needs_manager("priority")
        if cmd.priority is None:
            return say.command_priority_number(PRIORITY_RANGE.start, PRIORITY_RANGE.stop - 1)
        return None
    if not (owner or manager):
        return say.command_not_owner(cmd.name)
    return None
