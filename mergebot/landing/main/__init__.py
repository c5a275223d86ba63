"""The main room: where main moves, is reconciled and mended. ``land`` merges a candidate, fences it and moves
main to it by compare-and-swap (through a ``Target``); ``postland`` runs the check on main's new head and says
whether main is red; ``mend`` finds the landing that turned main red and lands its revert; ``reconcile`` makes
git's main and the database agree again after a crash; ``orphans`` catches up pushes no candidate accounts for;
``repos`` adds a repository and holds its queue.
"""
