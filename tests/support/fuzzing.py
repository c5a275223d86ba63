"""Hypothesis settings and strategies shared by the fuzz tests (``tests/test_fuzz_*.py``).

Example counts are small and fixed so the files stay fast; ``HTTP`` is for the runs that go through an app in
process, whose fixtures are function-scoped (hypothesis reuses them across examples on purpose).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HTTP = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SHA = st.text(alphabet="0123456789abcdef", min_size=40, max_size=40)
ZERO = "0" * 40
