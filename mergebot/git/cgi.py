"""Running ``git http-backend`` as a CGI: starting it so it dies with us, relaying its answer, killing it.

``mergebot.git.smarthttp`` decides who may do what and builds the CGI's environment; this module is the
process side. Rules:
  * The backend is started directly (not through the ``git http-backend`` wrapper, whose child is out of
    reach of our signals), in its own process group, and where util-linux's ``setpriv`` is there, with the
    kernel asked to kill it if this process dies (``backend_command``).
  * An ``Exchange`` parses the CGI's header block and relays stdout as it comes, but holds the response's
    start until the request body is in (or the CGI says more): an oversized body, a timeout or a disconnect
    while the body streams in still gets a real status instead of a cut-off 200.
  * Cutting an exchange short (``Exchange.abort``) kills the whole group: ``http-backend`` can spin at 100%
    CPU on an early end of input.
  * The CGI's HOME is an empty directory of ours, so no user config or credentials reach it or its hooks.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

from starlette.types import Send

MAX_HEADER_BYTES = 64 * 1024
CHUNK = 64 * 1024


class Abort(Exception):
    """The request ended early: ``status`` is what to answer when nothing has been sent yet (0: nothing)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message



def backend_command() -> list[str]:
    """How to start ``git http-backend`` so that it dies with this process, even by SIGKILL.

    ``git http-backend`` is a wrapper that runs ``git-http-backend`` as its child, out of reach of any signal
    we send it; and a SIGKILLed server cleans nothing up, so a backend cut off mid-request was left spinning
    at 100% CPU (found by the drills). The backend is run directly, and through util-linux's ``setpriv
    --pdeathsig KILL`` when it is there, which asks the kernel to kill it when its parent dies. Its own
    children (``receive-pack``, ``upload-pack``) then see their input end and exit."""
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=False).stdout.strip()
    backend = Path(exec_path) / "git-http-backend"
    cmd = [str(backend)] if exec_path and os.access(backend, os.X_OK) else ["git", "http-backend"]
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *cmd] if setpriv else cmd


class Exchange:
    """One CGI run: its process, what has been sent, and whether (and why) it was cut short."""

    def __init__(self, proc: asyncio.subprocess.Process, send: Send) -> None:
        self.proc = proc
        self.send = send
        self.body_done = asyncio.Event()
        self.started = False
        self.aborted: Abort | None = None

    def abort(self, status: int, message: str) -> None:
        if self.aborted is None:
            self.aborted = Abort(status, message)
        kill_group(self.proc)

    async def relay(self) -> None:
        """Parse the CGI's header block, answer with it, then stream stdout as it comes (all but the end)."""
        stdout = self.proc.stdout
        assert stdout is not None
        buf = bytearray()
        while True:
            end, sep = header_end(buf)
            if end >= 0:
                break
            if len(buf) > MAX_HEADER_BYTES:
                raise Abort(502, "git http-backend sent a header block that is too long")
            chunk = await stdout.read(CHUNK)
            if not chunk:
                if self.aborted is None:  # the CGI died without answering
                    await self.proc.wait()
                    raise Abort(502, f"git http-backend answered nothing (exit {self.proc.returncode})")
                return
            buf += chunk
        status, headers = parse_cgi_headers(bytes(buf[:end]))
        first = bytes(buf[end + sep:])
        # http-backend prints its headers before it reads the request. Hold them until the request body is in
        # (or the CGI says more), so that an oversized body, a timeout or a disconnect while the body streams
        # in still gets a real status instead of a cut-off 200.
        if not first and not self.body_done.is_set():
            first = await self._output_or_body_done(stdout)
        if self.aborted is not None:
            return
        self.started = True
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        if first:
            await self.send({"type": "http.response.body", "body": first, "more_body": True})
        while chunk := await stdout.read(CHUNK):
            if self.aborted is not None:
                return
            await self.send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def _output_or_body_done(self, stdout: asyncio.StreamReader) -> bytes:
        """Wait for the CGI's next output or the end of the request body, whichever comes first."""
        read = asyncio.ensure_future(stdout.read(CHUNK))
        body_done = asyncio.ensure_future(self.body_done.wait())
        try:
            await asyncio.wait({read, body_done}, return_when=asyncio.FIRST_COMPLETED)
            if not read.done():
                read.cancel()
                await asyncio.wait({read})  # a StreamReader allows one pending read: let this one finish
        finally:
            body_done.cancel()
            read.cancel()
        out = b"" if read.cancelled() else read.result()
        if not out and not self.body_done.is_set():
            # The end of output is not the end of the answer while the CGI still runs: http-backend hands its
            # stdout to receive-pack, which can finish before a child still copying the request body does.
            waits = {asyncio.ensure_future(self.proc.wait()), asyncio.ensure_future(self.body_done.wait())}
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        return out


def header_end(buf: bytearray) -> tuple[int, int]:
    crlf, lf = buf.find(b"\r\n\r\n"), buf.find(b"\n\n")
    if crlf >= 0 and (lf < 0 or crlf < lf):
        return crlf, 4
    if lf >= 0:
        return lf, 2
    return -1, 0


def parse_cgi_headers(block: bytes) -> tuple[int, list[tuple[bytes, bytes]]]:
    status = 0
    headers: list[tuple[bytes, bytes]] = []
    has_location = False
    for raw in block.split(b"\n"):
        line = raw.rstrip(b"\r")
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        name, value = name.strip().lower(), value.strip()
        if name == b"status":
            with contextlib.suppress(ValueError, IndexError):
                status = int(value.split()[0])
            continue
        if name == b"location":
            has_location = True
        headers.append((name, value))
    if not 100 <= status <= 599:
        status = 302 if has_location else 200
    return status, headers


def neutral_home() -> str:
    """An empty directory for the CGI's HOME: one per user, reused (a server killed with SIGKILL leaves no
    temporary directory behind); a private temporary one if that path is not safely ours."""
    path = Path(tempfile.gettempdir()) / f"mergebot-git-home-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        st = path.lstat()
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022:
        return str(path)
    home = tempfile.mkdtemp(prefix="mergebot-git-home-")
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


def kill_group(proc: asyncio.subprocess.Process) -> None:
    """Kill the CGI and everything it started (upload-pack, receive-pack, hooks)."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
