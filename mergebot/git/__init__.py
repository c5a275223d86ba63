"""Git plumbing: in-memory merges (repo.py) and the smart HTTP server (smarthttp.py)."""
