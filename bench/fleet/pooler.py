"""Requests per second through PgBouncer against direct: the seeds' coordination replay (``python -m bench.fleet
--scenario seeds``) on Debian's PostgreSQL 15, once with ``mergebot serve`` connected to the server and once
through Debian's PgBouncer 1.18 in transaction mode (``MERGEBOT_DATABASE_URL`` the pooler,
``MERGEBOT_DATABASE_DIRECT_URL`` the server), in one sitting, alternated ``--rounds`` times; the table's
``x first`` column is the pooled run against the direct one.

PostgreSQL 15 and PgBouncer run as the unprivileged ``postgres`` user, started as the tests start them
(``tests/support/pg.py``, ``tests/support/pooler.py``: fsync and synchronous_commit off, so the figures are the
pooler's cost, not the disk's). Run from the repository root, as root (for ``postgres``)::

    python -m bench.fleet.pooler                    # a tenth of the seeds' load, two rounds
    python -m bench.fleet.pooler --seeds-scale 0.25 --rounds 3

This prints figures; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import psycopg

from bench.fleet import run as fleet
from tests.support.pg import Server
from tests.support.pooler import Bouncer


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet.pooler",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--seeds-scale", default="0.1", help="the share of the seeds' load replayed per run")
    ap.add_argument("--rounds", default="2", help="each variant this many times, alternated")
    ap.add_argument("--connections", default="32", help="the load generator's keep-alive connections")
    args = ap.parse_args(argv)
    server = Server("pg15")
    bouncer = Bouncer(str(psycopg.conninfo.conninfo_to_dict(server.url)["host"]), users=["postgres", "mergebot_app"])
    try:
        os.environ["MERGEBOT_DATABASE_URL"] = server.url
        pooled = (f"MERGEBOT_DATABASE_URL=postgresql://postgres@127.0.0.1:{bouncer.port}/{{dbname}}"
                  "+MERGEBOT_DATABASE_DIRECT_URL={db_url}")
        print(f"PostgreSQL 15 at {server.url}; PgBouncer 1.18 (pool_mode=transaction) on 127.0.0.1:{bouncer.port}",
              flush=True)
        fleet.main(["--scenario", "seeds", "--seeds-scale", args.seeds_scale, "--rounds", args.rounds,
                    "--connections", args.connections, "--levers", f"direct=,pgbouncer={pooled}"])
        # what went through the pooler (only the pgbouncer runs use it), and what the pooler itself cost
        stats = [s for s in bouncer.show("STATS") if s["database"] != "pgbouncer"]
        xacts = sum(int(s["total_xact_count"]) for s in stats)
        queries = sum(int(s["total_query_count"]) for s in stats)
        pid = int((bouncer.tmp / "pgbouncer.pid").read_text())
        fields = (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1]).split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        print(f"\nthrough PgBouncer over the pgbouncer runs: {xacts:,} transactions, {queries:,} queries; PgBouncer's "
              f"own CPU {cpu:.2f} s ({1000 * cpu / max(queries, 1):.3f} ms per query)")
    finally:
        bouncer.stop()
        server.stop()


if __name__ == "__main__":
    main()
