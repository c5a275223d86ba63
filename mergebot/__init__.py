"""Mergebot: the landing service that fleets of coding agents trust with their main branch.

Where things live:
  * who owns which subtask, and every write fenced by claim version: ``mergebot.store`` (SQL in
    ``mergebot/db/queries.sql``, schema in ``mergebot/db/migrations``);
  * the database itself, embedded or external: ``mergebot.db``;
  * the HTTP API: ``mergebot.api``; the command line: ``mergebot.cli``;
  * pure decisions with no I/O (task-tree files, tokens): ``mergebot.tree``, ``mergebot.auth``.
"""

__version__ = "0.1.0"
