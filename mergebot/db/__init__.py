"""The database: the embedded server or any other (``connect``, ``embedded``, ``migrate``, ``roles``), the named
queries (``queries`` over ``*.sql``), and the stores composed on one pool (``database.Database``: ``agents``,
``subtasks``, ``landing``, ``jobs``, ``forge``, ``pages``, ``views``, with ``waiter`` for every wait and
``base`` for the plumbing and the one error translation). Nothing here imports the layers above it."""
