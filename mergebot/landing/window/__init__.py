"""The window room: which candidates run, speculation, and the executor. ``queue`` is each repository's loop,
led by one process (``leader``); ``planner`` decides what the window does next and ``chain`` holds its slots;
``executor`` does what the planner says (land, cut, bisect), starting and reading the runs of its slots
(``checkpoints``); ``apart`` judges candidates apart from the chain, ``alone`` one candidate against main itself,
and ``sweep`` tries queued candidates on main while the runs are busy.
"""
