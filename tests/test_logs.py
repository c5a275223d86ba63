"""Structured logs: one JSON object per line off a terminal, the short text format on one, secrets masked, and
``mergebot serve`` (uvicorn's loggers included) writing only JSON lines to a file."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.logs import JsonFormatter, configure_logging, scrub
from tests.support.bot import BotProcess

TOKEN = "mb_" + "Q" * 43


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    names = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx")
    saved = {n: (logging.getLogger(n).handlers[:], logging.getLogger(n).level, logging.getLogger(n).propagate)
             for n in names}
    yield
    for n, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(n)
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    return logging.getLogger("mergebot.test").makeRecord("mergebot.test", logging.WARNING, __file__, 1, msg, args,
                                                         None, extra=extra)


def test_json_line_has_the_fields_and_extras() -> None:
    line = JsonFormatter().format(_record("landed %s", 12, subtask=12, repo="demo", detail={"a": [1, 2]}))
    out = json.loads(line)
    assert out["level"] == "warning" and out["logger"] == "mergebot.test" and out["message"] == "landed 12"
    assert out["time"].endswith("+00:00") and "T" in out["time"]
    assert (out["subtask"], out["repo"], out["detail"]) == (12, "demo", '{"a": [1, 2]}')
    assert "\n" not in line


def test_exceptions_are_one_string_field() -> None:
    try:
        raise ValueError(f"bad token {TOKEN}")
    except ValueError:
        record = logging.getLogger("x").makeRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    out = json.loads(JsonFormatter().format(record))
    assert "Traceback" in out["exception"] and "ValueError: bad token mb_[redacted]" in out["exception"]
    assert TOKEN not in json.dumps(out)


def test_secrets_are_masked_in_messages_and_fields() -> None:
    out = json.loads(JsonFormatter().format(_record(
        "push with Authorization: Bearer %s to https://bot:%s@example.com/x.git", TOKEN, "hunter2secret",
        token=TOKEN, webhook_secret="s3cret", headers={"Authorization": f"Basic {TOKEN}"})))
    text = json.dumps(out)
    assert TOKEN not in text and "hunter2secret" not in text and "s3cret" not in text
    assert out["token"] == "[redacted]" and out["webhook_secret"] == "[redacted]"
    assert "https://bot:[redacted]@example.com/x.git" in out["message"]
    plain = "nothing secret here: mb_ is a prefix, database mb_test_1_2, a Basic installation"
    assert scrub(plain) == plain


def test_format_follows_the_terminal_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MERGEBOT_LOG_FORMAT", raising=False)
    monkeypatch.delenv("MERGEBOT_LOG_LEVEL", raising=False)
    pipe = io.StringIO()
    configure_logging(stream=pipe)
    logging.getLogger("mergebot.x").warning("to a pipe")
    assert json.loads(pipe.getvalue())["message"] == "to a pipe"

    tty = Tty()
    configure_logging(stream=tty)
    logging.getLogger("mergebot.x").warning("to a person %s", TOKEN)
    assert tty.getvalue() == "WARNING mergebot.x: to a person mb_[redacted]\n"
    assert pipe.getvalue().count("\n") == 1  # configuring again replaced the handler, it did not add one

    monkeypatch.setenv("MERGEBOT_LOG_FORMAT", "json")
    forced = Tty()
    configure_logging(stream=forced)
    logging.getLogger("mergebot.x").warning("forced")
    assert json.loads(forced.getvalue())["message"] == "forced"


def test_level_and_uvicorn_loggers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MERGEBOT_LOG_LEVEL", "error")
    monkeypatch.setenv("MERGEBOT_LOG_FORMAT", "json")
    logging.getLogger("uvicorn.error").addHandler(logging.StreamHandler(io.StringIO()))  # as uvicorn's config does
    logging.getLogger("uvicorn.error").propagate = False
    out = io.StringIO()
    configure_logging(stream=out, default_level=logging.INFO)
    logging.getLogger("mergebot.x").warning("below the level")
    logging.getLogger("uvicorn.error").error("from uvicorn")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(x["logger"], x["message"]) for x in lines] == [("uvicorn.error", "from uvicorn")]


async def test_serve_writes_json_lines_without_secrets(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> None:
    _, token = await e2e_db.agents.add_agent(name="rita", role=Role.REVIEWER)
    bot = BotProcess(e2e_db_url, tmp_path / "data", MERGEBOT_ACCESS_LOG="1").start()
    try:
        assert httpx.get(f"{bot.url}/api/v1/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert httpx.get(f"{bot.url}/api/v1/me", params={"token": token}).status_code == 401
    finally:
        bot.stop()
    text = bot.log.read_text()
    lines = [json.loads(line) for line in text.splitlines()]  # every line is one JSON object
    assert any(x["logger"] == "mergebot.serve" and "serving on" in x["message"] for x in lines)
    assert any(x["logger"].startswith("uvicorn") and x["level"] == "info" for x in lines)
    access = [x for x in lines if x["logger"] == "uvicorn.access"]
    assert {(x["method"], x["path"].split("?")[0], x["status"]) for x in access} >= {
        ("GET", "/api/v1/me", 200), ("GET", "/api/v1/me", 401)}
    assert token not in text and token[3:] not in text
