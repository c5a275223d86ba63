"""The judgement of a finished run: ``python -m bench.judge`` (the verifier's time per landing judged with main's
tests), ``bench.judge.outcomes`` (collecting and comparing per-test outcomes) and ``bench.judge.tamper`` (the
tamper signal on its corpus).
"""
