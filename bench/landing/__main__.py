"""``python -m bench.landing``: the bot's own cost per landing against a naive script (``bench/landing/run.py``)."""

from bench.landing.run import main

main()
