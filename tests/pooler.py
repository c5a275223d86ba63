"""Moved to ``tests/support/pooler.py``. Kept only because ``bench/pooler.py`` imports ``Bouncer`` from here;
delete this file when that import names ``tests.support.pooler``."""

from tests.support.pooler import Bouncer

__all__ = ["Bouncer"]
