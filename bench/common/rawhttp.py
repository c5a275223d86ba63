"""The load generators' HTTP client: keep-alive HTTP/1.1 connections parsed by hand, handed out first come, first
served.

Rules:

* **Cheap.** The load generator must cost less than the server it measures: ``httpx.AsyncClient`` spends several
  times the server's own CPU per request, and on a small machine that CPU is taken from the server. So a request
  is one write of the head and body, and the answer is read by hand: the status line, ``Content-Length`` or
  chunked transfer, ``Connection: close``. JSON only; no redirects, no TLS.
* **Never racing the server's idle timeout.** uvicorn closes a connection idle for 5 s; a connection idle for
  more than 3 s is reopened before it is used, rather than raced.
* **Fair.** ``Pool`` hands out its connections strictly first come, first served. (An ``asyncio.Queue`` is not
  fair: a task that puts a connection back and asks again at once takes it before the woken waiter runs, so a
  loop of requests keeps its connection and a newcomer -- an idle agent's claim -- can wait for seconds.) With
  several servers (replicas), the connections are spread over them in turn.
* **Honest about waiting.** ``Pool.send`` returns the seconds spent waiting for a free connection apart from the
  answer, so a benchmark can tell the server's latency from its own queue. A transport error closes the
  connection and is answered as status 0 with the error's text (``retry_reads``: a GET is tried once more first
  on a new connection).
"""

from __future__ import annotations

import asyncio
import collections
import time

TRANSPORT_ERRORS = (OSError, asyncio.IncompleteReadError, ValueError, IndexError)


class Conn:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.used = 0.0

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, head: bytes, body: bytes) -> tuple[int, bytes]:
        if self.writer is None or time.monotonic() - self.used > 3.0:
            self.close()
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None and self.writer is not None
        self.writer.write(head + body)
        line = await self.reader.readline()
        if not line:
            raise ConnectionError("the server closed the connection")
        status = int(line.split(b" ", 2)[1])
        length, chunked, close = 0, False, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and b"close" in value.lower():
                close = True
        if chunked:
            parts = []
            while size := int((await self.reader.readline()).split(b";")[0], 16):
                parts.append(await self.reader.readexactly(size))
                await self.reader.readline()
            await self.reader.readline()
            data = b"".join(parts)
        else:
            data = await self.reader.readexactly(length) if length else b""
        self.used = time.monotonic()
        if close:
            self.close()
        return status, data


class Pool:
    """``size`` connections over the servers at ``urls`` (``http://host:port``), first come, first served."""

    def __init__(self, urls: list[str], size: int) -> None:
        self.free: list[Conn] = []
        for i in range(size):
            host, port = urls[i % len(urls)].removeprefix("http://").split(":")
            self.free.append(Conn(host, int(port)))
        self.waiters: collections.deque[asyncio.Future[Conn]] = collections.deque()
        self.size = size

    async def acquire(self) -> Conn:
        if self.free and not self.waiters:
            return self.free.pop()
        fut: asyncio.Future[Conn] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())
            raise

    def release(self, conn: Conn) -> None:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return
        self.free.append(conn)

    async def send(self, method: str, path: str, token: str | None, body: bytes = b"", *,
                   retry_reads: bool = False) -> tuple[int, bytes, float]:
        """(status, body, seconds waiting for a free connection); status 0 for a transport error. ``token``
        None sends no Authorization header."""
        auth = "" if token is None else f"Authorization: Bearer {token}\r\n"
        head = (f"{method} {path} HTTP/1.1\r\nHost: bench\r\n{auth}Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        t = time.perf_counter()
        conn = await self.acquire()
        waited = time.perf_counter() - t
        try:
            for _ in range(2 if retry_reads and method == "GET" else 1):
                try:
                    return (*await conn.request(head, body), waited)
                except TRANSPORT_ERRORS as e:
                    conn.close()
                    error = e
            return 0, f"{type(error).__name__}: {error}".encode(), waited
        finally:
            self.release(conn)

    async def close(self) -> None:
        for conn in self.free:
            conn.close()
