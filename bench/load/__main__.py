"""``python -m bench.load``: the load test of issue 8 (``bench/load/run.py``)."""

from bench.load.run import main

main()
