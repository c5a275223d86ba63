"""Debian's PgBouncer for the tests: started as the unprivileged ``postgres`` user in ``pool_mode=transaction``
in front of a test server's unix socket, on a loopback port, with an admin console to read what went through it.

Under ``CI=true`` a missing PgBouncer or PostgreSQL 15 is a failure (``.ci/run`` installs both), elsewhere a skip.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.bot import free_port

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def need(what: str, present: bool) -> None:
    """Skip without ``what``, except in CI, where its absence fails the test."""
    if present:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing: .ci/run installs it from Debian")
    pytest.skip(f"{what} is not installed here")


class Bouncer:
    """One PgBouncer in transaction mode: every database of the server at ``socket_dir`` behind 127.0.0.1:port,
    trusting the users in ``users`` (the auth_file PgBouncer needs even with trust)."""

    def __init__(self, socket_dir: str, users: list[str]) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="mb-pgbouncer-"))
        pw = pwd.getpwnam("postgres")
        os.chmod(self.tmp, 0o755)
        os.chown(self.tmp, pw.pw_uid, pw.pw_gid)
        self.port = free_port()
        (self.tmp / "users.txt").write_text("".join(f'"{u}" ""\n' for u in users))
        (self.tmp / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={socket_dir}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.tmp / 'users.txt'}\n"
            "pool_mode = transaction\n"
            "max_client_conn = 400\n"
            "default_pool_size = 10\n"
            "admin_users = postgres\n"
            f"logfile = {self.tmp / 'pgbouncer.log'}\n"
            f"pidfile = {self.tmp / 'pgbouncer.pid'}\n")
        for f in self.tmp.iterdir():
            os.chown(f, pw.pw_uid, pw.pw_gid)
        subprocess.run([PGBOUNCER, "-d", "-q", str(self.tmp / "pgbouncer.ini")], user="postgres", check=True,
                       capture_output=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.show("VERSION")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def url(self, dbname: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW what`` on the admin console (STATS, SERVERS, CLIENTS, POOLS)."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True, prepare_threshold=None) as conn:
            cur = conn.execute(f"SHOW {what}")
            names = [d.name for d in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def log(self) -> str:
        path = self.tmp / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        pid = self.tmp / "pgbouncer.pid"
        if pid.exists():
            subprocess.run(["kill", pid.read_text().strip()], check=False, capture_output=True)
            deadline = time.monotonic() + 5
            while pid.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        shutil.rmtree(self.tmp, ignore_errors=True)
