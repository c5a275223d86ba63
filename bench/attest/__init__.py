"""Signed landing statements (issue 44): ``python -m bench.attest`` (what building, signing and storing a landing's
statements adds to it, and ``mergebot attest verify`` over 1,000 landings; ``bench/attest/run.py``).
"""
