"""The independent verifier: runs a repository's check on one exact commit and reports the evidence.

``verifier.runner.run_check`` is the plain runner used by the merge queue today (fresh checkout, time limit,
bounded log, tree check). Sandboxing with bubblewrap, reusable checkouts and verifier workers that claim jobs
from PostgreSQL are issue 4 and not built yet; until then every result records its sandbox as ``none``.
"""
