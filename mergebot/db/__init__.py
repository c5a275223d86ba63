"""The database: the embedded server or any other (``connect``, ``embedded``, ``migrate``, ``roles``), the named
queries (``queries/``: one ``<store>.sql`` per store, and the read models), and the stores composed on one pool
(``database.Database``: ``agents``, ``subtasks``, ``repos``, ``landing``, ``jobs``, ``forge``, ``reverts``,
``pages``, ``views``, with ``waiter`` for every wait and ``base`` for the plumbing and the one error translation).
Nothing here imports the layers above it."""
