"""Hold a zombie postmaster on purpose, as PID 1 in a container without an init does for a second or two.

Run as ``python tests/support/zombie_holder.py DATA_DIR``. It makes itself the child subreaper, so the orphaned
postmaster becomes its child; starts the embedded server for DATA_DIR in a child process that exits without
stopping it (a killed ``mergebot serve``: its pid stays on the server's list of users); SIGKILLs the postmaster
and never reaps it. It prints ``{"zombie": PID}`` and holds the zombie until its stdin closes, then reaps.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

PR_SET_CHILD_SUBREAPER = 36
START = "import os, sys; from pathlib import Path; from mergebot.db.embedded import start_embedded; " \
        "start_embedded(Path(sys.argv[1])); os._exit(0)"


def main(data: str) -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    subprocess.run([sys.executable, "-c", START, data], check=True)
    pid = int((Path(data) / "pg" / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        if time.monotonic() > deadline:
            raise RuntimeError(f"postmaster {pid} did not become a zombie")
        time.sleep(0.05)
    print(json.dumps({"zombie": pid}), flush=True)
    sys.stdin.read()
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


if __name__ == "__main__":
    main(sys.argv[1])
