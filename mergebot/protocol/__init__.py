"""The landing protocol, model-checked (issue 46): a small explicit-state model of claims, pushes, the window,
landings by compare-and-swap, crashes and the reconciler (``model``, the window's steps in ``window``, a red main's
mending in ``red``), a checker that visits every state it can reach within a bound (``check``, its properties in
``properties``), and planted bugs the checker must catch (``mutants``). ``docs/protocol.md`` tells the model in
prose; ``python -m mergebot.protocol`` checks the default bound.

It sits on layer 2 with the work it models, as a unit of its own rather than a room of ``landing``: it calls the
pure decisions of several rooms at once (intake's push rules, the window's planner, judge's verdict policy, main's
reconciler), which a room could only do from the top level, and nothing in ``landing`` may depend on it. It
touches no database, git repository or network.
"""
