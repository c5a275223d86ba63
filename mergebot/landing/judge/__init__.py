"""The judge room: a finished run to a typed verdict. ``runs`` asks the verifier workers for a run and waits for it;
the judgement below makes it one typed record; ``verdict`` decides what follows (land, retry, compare with main,
park or reject), ``verdicts`` turns a decision into the typed ``Verdict`` every door shows, ``evidence`` is what
the candidate's record keeps of its runs, ``told`` what an agent is told, and ``acceptance`` holds a subtask's
acceptance tests.

The judgement of a candidate's code: main's tests judge it, in a run the verifier starts.

One step for every candidate run (``step``): the commit its checks run on is the merged commit with every test path
as on main (``reset``), the candidate's own tests run apart on the merged commit, a run that passed is held to
main's tests (``compare``) and followed by the held-out checks (``heldout``), and what it came to is one typed
record (``Judgement``). The verdict policy (``mergebot.landing.judge.verdict``) then decides retry, park or reject.

The modules are imported by name (``from mergebot.landing.judge import step``): the pure ``reset`` is read by the
push rules too, which must not load the rest.
"""
