"""``python -m bench.fleet``: the whole-system fleet benchmark (``bench/fleet/run.py``)."""

from bench.fleet.run import main

main()
