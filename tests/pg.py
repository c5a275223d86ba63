"""Moved to ``tests/support/pg.py``. Kept only because ``bench/pooler.py`` imports ``Server`` from here; delete
this file when that import names ``tests.support.pg``."""

from tests.support.pg import Server

__all__ = ["Server"]
