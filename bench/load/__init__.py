"""The load test of issue 8: ``python -m bench.load``, agents claiming and heart-beating against one server.
"""
