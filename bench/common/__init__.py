"""What every benchmark shares: the database and a real ``mergebot serve`` (``harness``, with its
store calls in ``harness_store``), figures and timers (``measure``), git (``gitenv``) and the load generators'
HTTP client (``rawhttp``). No benchmark runs from here.
"""
