"""Mergebot's benchmarks, one sub-package per topic; every one prints figures and asserts nothing about timing.

Run each as a module from the repository root, with the project's Python: ``python -m bench.<topic>`` runs the
topic's main benchmark (its code in ``bench/<topic>/run.py``), ``python -m bench.<topic>.<name>`` each other one.
``--help`` lists a benchmark's options; its module docstring says what it measures.

* ``fleet``: the whole system under a fleet of agents (``coordination``, ``pooler``, ``window_model``);
* ``claims``: the claim cycle's throughput (``cost``: what each part of a claim costs);
* ``landing``: the bot's own cost per landing (``chain``, ``replay``, ``named_checks``: the time between landings, a
  real-size replay, named checks in parallel against the same commands glued into one);
* ``load``: agents claiming and heart-beating against one server;
* ``pages``: the pages on the server (``history``: charts and metrics on a long history);
* ``judge``: judging with main's tests (``outcomes``, ``tamper``: per-test outcomes, the tamper signal);
* ``attest``: what signing and storing a landing's statements adds to it, and ``mergebot attest verify`` over 1,000
  landings;
* ``verifier``: a check's overhead (``warm``, ``sandbox_cpu``: cached setup, the server while a check burns CPU);
* ``common``: what they share (the database and server, figures and timers, git, a cheap HTTP client).
"""
