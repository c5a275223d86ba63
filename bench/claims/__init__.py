"""The claim cycle: ``python -m bench.claims`` (throughput against a plain UPDATE loop and procrastinate) and
``bench.claims.cost`` (what each part of one claim costs).
"""
