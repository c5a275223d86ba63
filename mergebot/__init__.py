"""Mergebot: the landing service that fleets of coding agents trust with their main branch.

Where things live (imports point down this list only; ``tests/test_layers.py`` checks it):
  * the pages, the HTTP API, the command line and the demo: ``mergebot.web``, ``mergebot.api``, ``mergebot.cli``,
    ``mergebot.demo``;
  * where a push is judged and where main moves: ``mergebot.landing``, in rooms by job: ``intake`` (``prereceive``
    and ``checks``: what a push is held to before it queues), ``window`` (the queue's ``executor``, its
    ``planner`` and ``alone``), ``judge`` (a finished run to a typed verdict), ``main`` (``land``: main's
    compare-and-swap; ``reconcile``, ``mend``), over ``target`` and ``context``; forge webhooks and statuses:
    ``mergebot.forge``; verifier workers: ``mergebot.verify``; the agent's side of a push: ``mergebot.agent``;
    failure drills: ``mergebot.drill``; lease recovery: ``mergebot.recovery``;
  * the database, one pool and small stores composed on it: ``mergebot.db`` (``database.Database``; a claim is
    made in ``subtasks.py`` by the ``subtask_claim`` query of ``queries/subtasks.sql``); git plumbing:
    ``mergebot.git``;
  * records, every sentence anyone is told, errors, settings and pure helpers (task-tree files, tokens, tables):
    ``mergebot.models``, ``mergebot.messages``, ``mergebot.errors``, ``mergebot.settings``, ``mergebot.tree``,
    ``mergebot.auth``, ``mergebot.table``, ``mergebot.client`` (the HTTP API's client), ``mergebot.logs``.
``verifier`` (beside this package) runs a check on one commit and imports nothing from it.
"""

__version__ = "0.1.0"
