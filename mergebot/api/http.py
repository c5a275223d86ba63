"""The HTTP server that runs the application: uvicorn (h11, pure Python) or granian (hyper, native code).

``MERGEBOT_HTTP_SERVER`` chooses. Both run the one application object in this process, on this process's event
loop, with its lifespan (the queue, the workers, the listeners) inside it, and stop gracefully on SIGTERM or
SIGINT. Logging is ours either way: neither installs handlers of its own.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any


def run(app: Any, *, host: str, port: int, server: str, access_log: bool) -> None:
    if server == "granian":
        asyncio.run(_granian(app, host, port, access_log))
        return
    import uvicorn

    # log_config=None: uvicorn installs no handlers of its own, so its lines go through ours.
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()
    uvicorn.run(app, host=host, port=port, log_config=None, log_level=level, access_log=access_log)


async def _granian(app: Any, host: str, port: int, access_log: bool) -> None:
    try:
        from granian.constants import Interfaces
        from granian.server.embed import Server
    except ImportError:
        raise SystemExit("mergebot: MERGEBOT_HTTP_SERVER=granian needs granian: pip install 'mergebot[granian]'"
                         ) from None

    logging.getLogger("_granian").setLevel(logging.ERROR)  # it warns that its embedded mode is experimental
    server = Server(app, address=host, port=port, interface=Interfaces.ASGI, log_enabled=False,
                    log_access=access_log, backlog=1024)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stop)
    await server.serve()
