"""The judgement of a candidate's code: main's tests judge it, in a run the verifier starts.

One step for every candidate run (``step``): the commit its checks run on is the merged commit with every test path
as on main (``reset``), the candidate's own tests run apart on the merged commit, a run that passed is held to
main's tests (``compare``) and followed by the held-out checks (``heldout``), and what it came to is one typed
record (``Judgement``). The verdict policy (``mergebot.landing.verdict``) then decides retry, park or reject.

The modules are imported by name (``from mergebot.landing.judge import step``): the pure ``reset`` is read by the
push rules too, which must not load the rest.
"""
