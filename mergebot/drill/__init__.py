"""Failure drills over the wire, and the one invariant check that the drill tests and ``mergebot drill`` share.

  * ``invariants``: the pure check of one ``Snapshot`` (main's history, the landed rows, the subtasks, their
    candidates, the subtask branches, and the pushes a drill made): a list of ``Violation``, empty when the books
    balance.
  * ``gather``: a snapshot read from a running server with any token, and ``stable_check``, the check repeated
    until its answer holds still.
  * ``wire``: the git and HTTP moves every drill makes (``_git``, ``push_head``, ``commit_file``, ``retry``) and
    the slow link of the lease race.
  * ``fleet``: the agents and subtasks of one run, and one agent's moves.
  * ``scenarios``: the drills themselves, ``Drill.stream`` and ``Drill.lease_race``; ``storm``: the webhook
    redelivery storm.
  * ``command``: ``mergebot drill`` (``run`` and its ``add_arguments``).

Imports point one way: command, then scenarios and storm, then fleet and gather, then wire and invariants.
"""

from mergebot.drill.command import add_arguments, run

__all__ = ["add_arguments", "run"]
