"""``python -m bench.judge``: what judging with main's tests costs the verifier per landing (``bench/judge/run.py``)."""

from bench.judge.run import main

main()
