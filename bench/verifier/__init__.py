"""The verifier: ``python -m bench.verifier`` (a reused sandboxed slot against a fresh clone),
``bench.verifier.warm`` (cached setup, cold against warm) and ``bench.verifier.sandbox_cpu`` (the server's
latency while a check burns every core).
"""
