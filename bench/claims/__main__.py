"""``python -m bench.claims``: claim throughput against an UPDATE loop and procrastinate (``bench/claims/run.py``)."""

from bench.claims.run import main

main()
