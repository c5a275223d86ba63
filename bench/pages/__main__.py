"""``python -m bench.pages``: how long the pages take to render on the server (``bench/pages/run.py``)."""

from bench.pages.run import main

main()
