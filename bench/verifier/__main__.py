"""``python -m bench.verifier``: the verifier's per-run overhead against a fresh clone (``bench/verifier/run.py``)."""

from bench.verifier.run import main

main()
