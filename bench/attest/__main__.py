"""``python -m bench.attest``: what the signed landing statements cost a landing, and ``mergebot attest verify`` over
1,000 landings (``bench/attest/run.py``)."""

from bench.attest.run import main

main()
