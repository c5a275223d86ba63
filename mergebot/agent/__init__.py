"""The agent's side (the seeds' executor): a worktree per claim (``worktree``), pushes followed to their verdict
(``submit``), and the keeper that keeps a claim alive while the agent thinks (``keeper``)."""

from mergebot.agent.submit import push
from mergebot.agent.worktree import Claim, current_claim, handoff_note, start

__all__ = ["Claim", "current_claim", "handoff_note", "push", "start"]
