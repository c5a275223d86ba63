"""Secrets out of every text a check leaves: each known secret's value becomes ``***``.

Rules:
  * A secret is a value of at least ``MIN_LENGTH`` characters (shorter values would mask ordinary words); the
    caller says which values are secret (``mergebot.secrets`` collects the bot's). Longer secrets are matched
    first, so one that contains another is masked whole.
  * A log is masked as it streams (``Stream``), before it is cut to its head and tail, and the result is the
    same as masking the whole log at once: a secret split across two reads of the pipe is still found, because
    the last ``longest - 1`` bytes wait for the next read (or the end). So neither the cut nor the digest can
    carry a secret: both are taken of masked bytes.
  * Text masked after the fact (``Masker.text``: a result that came from a worker which did not know every
    secret, a message, a status) may have been cut by someone else: ``Masker.cut`` also masks, at the edges of a
    text that was cut out of a longer one, any piece of a secret of ``MIN_PIECE`` characters or more (the start
    of one at the end of a head, the end of one at the start of a tail).
  * Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MIN_LENGTH = 8
MIN_PIECE = 4
MASK = "***"


class Masker:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted({s for s in secrets if isinstance(s, str) and len(s) >= MIN_LENGTH}, key=len, reverse=True)
        self.values = values
        self._text = re.compile("|".join(re.escape(v) for v in values)) if values else None
        raw = sorted({v.encode() for v in values}, key=len, reverse=True)
        self._bytes = re.compile(b"|".join(re.escape(v) for v in raw)) if raw else None
        self.longest = max((len(v) for v in raw), default=0)

    def __bool__(self) -> bool:
        return bool(self.values)

    def text(self, text: str) -> str:
        return self._text.sub(MASK, text) if self._text is not None and text else text

    def bytes(self, data: bytes) -> bytes:
        return self._bytes.sub(MASK.encode(), data) if self._bytes is not None and data else data

    def cut(self, text: str, *, head: bool = False, tail: bool = False) -> str:
        """``text`` masked, and also, where it was cut out of a longer text, the pieces of secrets at its edges:
        ``head`` (it is the start of something longer: its end may hold a secret's start) and ``tail`` (it is
        the end of something longer: its start may hold a secret's end)."""
        text = self.text(text)
        for value in self.values:
            if head:
                for n in range(min(len(value) - 1, len(text)), MIN_PIECE - 1, -1):
                    if text.endswith(value[:n]):
                        text = text[:-n] + MASK
                        break
            if tail:
                for n in range(min(len(value) - 1, len(text)), MIN_PIECE - 1, -1):
                    if text.startswith(value[-n:]):
                        text = MASK + text[n:]
                        break
        return text

    def json(self, value: object) -> object:
        """Every string inside a JSON value (dicts, lists, strings) masked; keys too."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.json(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.json(v) for k, v in value.items()}
        return value

    def stream(self) -> Stream:
        return Stream(self)


class Stream:
    """Masks a byte stream fed in pieces: ``feed`` returns what is safe to pass on, ``end`` the rest."""

    def __init__(self, masker: Masker) -> None:
        self.masker = masker
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        pattern = self.masker._bytes
        if pattern is None:
            return chunk
        buf = self._held + chunk
        # A match that starts in the last ``longest - 1`` bytes may still grow into a longer secret (or a secret
        # may start there): those bytes wait for more. A match that starts before them is final, as masking the
        # whole stream at once would find it, and it is passed on whole even where it ends among them.
        cut = max(0, len(buf) - (self.masker.longest - 1))
        out, pos = [], 0
        for m in pattern.finditer(buf):
            if m.start() >= cut:
                break
            out += [buf[pos:m.start()], MASK.encode()]
            pos = m.end()
            cut = max(cut, pos)
        out.append(buf[pos:cut])
        self._held = buf[cut:]
        return b"".join(out)

    def end(self) -> bytes:
        out, self._held = self._held, b""
        return self.masker.bytes(out) if out else out
