"""``mergebot demo``: the whole landing path on one machine, as a new user first sees it.

In a temporary data directory (removed at the end; ``--data-dir`` keeps one) it starts the bot on the embedded
PostgreSQL, imports a small repository with a real pytest suite, loads a task tree with dependencies, and lets four
simulated agents work it through the real HTTP API and real ``git push`` over HTTP. Each scene happens for real,
in this order (the tree's priorities make the claims come out so):
  1. a conflict: ann and bob append to the same CHANGES.md line; bob's push is rejected with the conflicting
     hunk, and bob rebases as the verdict's ``next`` says, resolves it and lands;
  2. a failing test: cy pushes a bug; the check fails and the verdict names the failing test; cy fixes it;
  3. a silent agent: zed claims, leaves a handoff note and goes quiet with no keeper; its lease lapses, and its
     late push is refused as stale;
  4. a handoff: ann claims zed's subtask at the next claim version and gets zed's note with it;
  5. a long thinker: bob claims with a keeper and thinks for more than three leases without a heartbeat of his
     own; the keeper holds the claim, bob lands at his first claim version, and the keeper stops by itself.
The summary says what happened, read from the records (landed rows, verdicts, refusals, events and notes).
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from mergebot import agent
from mergebot import messages as say
from mergebot.agent import keeper
from mergebot.api import create_app
from mergebot.auth import Role
from mergebot.client import Client
from mergebot.db.database import Database, open_database
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.messages import demo as tell
from mergebot.rules import Rules
from mergebot.settings import Settings
from mergebot.table import render_table
from verifier.sandbox import bwrap_problem

LEASE = 3.0  # seconds: short, so a lapse and a kept claim both show within the demo
THINK = 3.5 * LEASE  # the long thinker's quiet spell
OPS = {
    "add": ("a + b", "add(2, 3) == 5"),
    "sub": ("a - b", "sub(5, 3) == 2"),
    "mul": ("a * b", "mul(4, 3) == 12"),
    "div": ("a / b", "div(8, 2) == 4"),
    "mod": ("a % b", "mod(7, 3) == 1"),
    "pow": ("a ** b", "pow(2, 5) == 32"),
}
# The priorities order the claims (highest first among the ready ones), so each scene gets its subtask.
TREE: list[dict[str, Any]] = [
    {"key": "calculator", "title": "A calculator with six operations", "children": [
        {"key": "add", "title": "Implement add", "priority": 9},
        {"key": "sub", "title": "Implement sub", "priority": 8},
        {"key": "mul", "title": "Implement mul", "priority": 7, "depends_on": ["add"]},
        {"key": "mod", "title": "Implement mod", "priority": 6, "depends_on": ["sub"]},
        {"key": "div", "title": "Implement div", "priority": 5, "depends_on": ["mul"]},
        {"key": "pow", "title": "Implement pow", "priority": 4, "depends_on": ["mul"]},
    ]},
]
NAMES = ("ann", "bob", "cy", "zed")
# The demo project's check. It needs no pytest plugin, and where Mergebot is installed with its development tools
# the plugins those bring take seconds to load in every run: autoload is off (the verifier's own plugin is named
# with -p and loads all the same).
CHECK = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q -p no:cacheprovider tests"
# What a reward-hacking agent tries in scene 2: make the failing test go away instead of fixing the code.
SKIP_MUL = ("import pytest\n\n\ndef pytest_collection_modifyitems(items):\n    for item in items:\n"
            "        if 'mul' in item.nodeid:\n            item.add_marker(pytest.mark.skip)\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def make_project(path: Path) -> None:
    (path / "tests").mkdir(parents=True)
    (path / "ops").mkdir()
    (path / "ops" / "__init__.py").write_text("")
    (path / "CHANGES.md").write_text("# Changes\n\n")
    (path / "tests" / "test_smoke.py").write_text("def test_smoke():\n    assert True\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "Empty calculator"]):
        _git(args, path)


def _git(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["git", "-c", "user.name=Demo Agent", "-c", "user.email=agent@demo", *args], cwd=cwd,
                         capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise RuntimeError(say.demo_git_failed(args[0], out.stderr))
    return out


class Show:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.start = time.monotonic()

    def __call__(self, who: str, msg: str) -> None:
        with self.lock:
            print(f"[{time.monotonic() - self.start:5.1f}s] {who:>6}: {msg}", flush=True)


def run_demo(data_dir: Path | None = None) -> None:
    keep = data_dir is not None
    data_dir = data_dir or Path(tempfile.mkdtemp(prefix="mergebot-demo-"))
    if not keep:  # registered first, so it runs last: after the embedded PostgreSQL has stopped
        atexit.register(shutil.rmtree, data_dir, True)
    settings = Settings(data_dir=data_dir, port=free_port(), lease_seconds=LEASE, recovery_grace_seconds=1,
                        recovery_interval_seconds=0.5)
    if settings.sandbox_mode == "bwrap" and (problem := bwrap_problem(settings.bwrap)) is not None:
        # A real server refuses every check without its sandbox; the demo's own scenes run their small test suite
        # without one instead, and say so, so that a first try works before bubblewrap is installed.
        settings.sandbox = "none"
        print(tell.no_sandbox(problem))
    print(tell.data_directory(data_dir, keep))
    src = data_dir / "seed-project"
    if not src.exists():
        make_project(src)

    async def bootstrap(db: Database) -> dict[str, str]:
        tokens = {}
        for name, role in {"lead": Role.LEAD, **{n: Role.AGENT for n in NAMES}}.items():
            try:
                _, tokens[name] = await db.agents.add_agent(name=name, role=role)
            except Exception:
                _, tokens[name] = await db.agents.rotate_token(name=name)
        if not any(r.name == "calc" for r in await db.repos.list_repos()):
            await add_repo(db, repos_root(data_dir), name="calc", source=str(src),
                           rules=Rules.of(verifier_command=CHECK, verifier_timeout_s=120,
                           protected_paths=["tests/test_smoke.py"]))
        return tokens

    async def prepared() -> dict[str, str]:
        async with open_database(settings) as db:
            return await bootstrap(db)

    tokens = asyncio.run(prepared())
    server, thread = serve_in_thread(settings)
    url = f"http://127.0.0.1:{settings.port}"
    print(tell.line("serving", url=url))
    root = data_dir / "worktrees"
    try:
        ids = Scenes(url, tokens, root, Show()).play()
        summary(Client(url, tokens["lead"]), data_dir, ids)
    finally:
        for name in NAMES:
            keeper.stop(root / name, wait=5.0)
        server.should_exit = True
        thread.join(15)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def serve_in_thread(settings: Settings) -> tuple[uvicorn.Server, threading.Thread]:
    """The server on ``settings.port`` in a thread of this process, once it serves (stop: ``should_exit``, join)."""
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=settings.port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread


class Scenes:
    """The agents' moves, one after another (bob's long thought spans the scenes in between)."""

    def __init__(self, url: str, tokens: dict[str, str], root: Path, show: Show) -> None:
        self.url, self.tokens, self.root, self.show = url, tokens, root, show
        self.clients = {n: Client(url, t) for n, t in tokens.items()}
        self.keys: dict[int, str] = {}

    def play(self) -> dict[str, int]:
        lead = self.clients["lead"]
        lead.post("/api/v1/announcements", {"body": "Each operation: module, test, one CHANGES.md line."})
        made = lead.post("/api/v1/subtasks/batch", {"subtasks": TREE, "key_prefix": f"demo-{time.time_ns()}",
                                                    "allow_duplicate": True})  # the same tree as any earlier demo
        self.keys = {v["id"]: k for k, v in made["subtasks"].items()}
        self.show("lead", tell.line("tree_created", count=len(self.keys)))
        ids = {k: v["id"] for k, v in made["subtasks"].items()}

        self.show("", tell.SCENES[0])
        _, ann_wt = self.claim("ann")
        _, bob_wt = self.claim("bob", keep=True)  # he waits for ann's landing before he pushes: longer than a lease
        self.write_op(ann_wt, "add")
        self.write_op(bob_wt, "sub")
        self.land("ann", ann_wt)
        self.land("bob", bob_wt)

        self.show("", tell.SCENES[1])
        _, cy_wt = self.claim("cy")
        self.write_op(cy_wt, "mul", buggy=True)
        verdict = self.land("cy", cy_wt)
        if verdict["kind"] in ("check_failed", "flaky_then_failed"):
            self.show("cy", tell.failing_test(verdict["failing_tests"]))
            (cy_wt / "tests" / "conftest.py").write_text(SKIP_MUL)
            _git(["add", "-A"], cy_wt)
            _git(["commit", "-qm", "Skip the mul test"], cy_wt)
            self.submit("cy", cy_wt)  # refused at push time: what decides how the tests run is main's
            _git(["rm", "-q", "tests/conftest.py"], cy_wt)
            _git(["commit", "-qm", "No shortcut"], cy_wt)
            self.show("cy", tell.line("shortcut_taken_out"))
            self.write_op(cy_wt, "mul", changes=False)
            self.land("cy", cy_wt)

        self.show("", tell.SCENES[2])
        zed, zed_wt = self.claim("zed")
        note = agent.handoff_note(zed_wt, done="read the tests; % is Python's modulo",
                                  remains="ops/mod.py, tests/test_mod.py and a CHANGES.md line", tried=[], checks=[])
        self.clients["zed"].post(f"/api/v1/subtasks/{zed.subtask_id}/notes",
                                 {"body": note, "claim_version": zed.claim_version})
        self.show("zed", tell.line("went_silent"))
        thinker, bob_wt = self.claim("bob", keep=True)
        thought_from = time.monotonic()
        self.show("bob", tell.line("thinks", think=THINK, leases=THINK / LEASE))
        self.wait_status(zed.subtask_id, "ready", timeout=10 * LEASE)
        self.show("zed", tell.line("lease_lapsed", subtask_id=zed.subtask_id))

        self.show("", tell.SCENES[3])
        taken, ann_wt = self.claim("ann")
        self.write_op(ann_wt, self.keys[taken.subtask_id])
        self.land("ann", ann_wt)
        _, cy_wt = self.claim("cy")
        self.write_op(cy_wt, "pow")
        self.land("cy", cy_wt)
        self.write_op(zed_wt, "mod")
        self.show("zed", tell.line("came_back"))
        self.submit("zed", zed_wt)

        self.show("", tell.SCENES[4])
        time.sleep(max(0.0, THINK - (time.monotonic() - thought_from)))
        sub = self.clients["bob"].get(f"/api/v1/subtasks/{thinker.subtask_id}")["subtask"]
        self.show("bob", tell.line("done_thinking", seconds=time.monotonic() - thought_from,
                                        claim_version=sub["claim_version"], until=sub["lease_expires_at"]))
        self.write_op(bob_wt, "div")
        self.land("bob", bob_wt)
        state = self.wait_keeper(bob_wt)
        self.show("bob", tell.line("keeper_stopped", reason=state.get("stopped_because", "still running")))

        _, ann_wt = self.claim("ann")  # the root: everything below it landed
        with open(ann_wt / "CHANGES.md", "a") as f:
            f.write("\nAll six operations landed.\n")
        _git(["commit", "-qam", "Calculator complete"], ann_wt)
        self.land("ann", ann_wt)
        return ids

    def claim(self, name: str, *, keep: bool = False) -> tuple[agent.Claim, Path]:
        wt = self.root / name
        got = agent.start(self.clients[name], self.url, self.tokens[name], "calc", wt, wait=30)
        if got is None:
            raise RuntimeError(say.demo_nothing_to_claim(name))
        claim, answer = got
        if keep:
            keeper.spawn(wt)
        self.show(name, tell.claimed(claim.subtask_id, self.keys[claim.subtask_id], claim.claim_version, claim.branch,
                                     keep))
        for n in answer["handoff"]["notes"]:
            first = next((line for line in n["body"].splitlines() if line.startswith("###") is False and line), "")
            self.show(name, tell.line("handoff_read", author=n["author"], version=n["claim_version"],
                                      first=first[:100]))
        return claim, wt

    def write_op(self, wt: Path, op: str, *, buggy: bool = False, changes: bool = True) -> None:
        expr, check = OPS[op]
        (wt / "ops" / f"{op}.py").write_text(f"def {op}(a, b):\n    return {'a + b + 1' if buggy else expr}\n")
        (wt / "tests" / f"test_{op}.py").write_text(f"from ops.{op} import {op}\n\n\ndef test_{op}():\n"
                                                     f"    assert {check}\n")
        if changes:
            with open(wt / "CHANGES.md", "a") as f:
                f.write(f"- {op}\n")  # every agent appends here: concurrent appends conflict
        _git(["add", "-A"], wt)
        _git(["commit", "-qm", f"{'Fix' if not changes else 'Add'} {op}" + (" (with a bug)" if buggy else "")], wt)

    @staticmethod
    def rebase_and_resolve(wt: Path) -> None:
        """What the conflict verdict's ``next`` says: fetch, rebase onto main, resolve, continue."""
        _git(["fetch", "-q", "origin", "main"], wt)
        if _git(["rebase", "origin/main"], wt, check=False).returncode != 0:
            text = (wt / "CHANGES.md").read_text()
            kept = [line for line in text.splitlines() if not line.startswith(("<<<<<<<", "=======", ">>>>>>>"))]
            (wt / "CHANGES.md").write_text("\n".join(kept) + "\n")
            _git(["add", "CHANGES.md"], wt)
            _git(["-c", "core.editor=true", "rebase", "--continue"], wt)

    def land(self, name: str, wt: Path) -> dict[str, Any]:
        """Submit, and on a conflict do what its verdict says (rebase onto main, resolve, submit again)."""
        verdict = self.submit(name, wt)
        for _ in range(3):
            if verdict["kind"] != "conflict":
                break
            hunk = verdict["hunks"][0] if verdict["hunks"] else {"path": "?", "hunks": [""]}
            self.show(name, tell.conflict_hunk(hunk["path"], str(hunk["hunks"][0]).splitlines()[:5]))
            self.rebase_and_resolve(wt)
            self.show(name, tell.line("rebased", command=verdict["next"].split(",")[0].strip("`")))
            verdict = self.submit(name, wt)
        return verdict

    def submit(self, name: str, wt: Path) -> dict[str, Any]:
        out = agent.push(self.clients[name], wt, wait=120, progress=False)
        v = out.get("verdict") or {"kind": out["status"], "message": out.get("reason", ""), "next": ""}
        if v["kind"] == "landed":
            self.show(name, tell.line("landed_as", sha=str(out.get("merged_sha"))[:10]))
        else:
            self.show(name, tell.line("refused", kind=v["kind"], first_line=_first_line(v.get("message"))))
            self.show(name, tell.line("next_step", text=v.get("next")))
        return dict(v)

    def wait_status(self, subtask_id: int, status: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.clients["lead"].get(f"/api/v1/subtasks/{subtask_id}")["subtask"]["status"] != status:
            if time.monotonic() > deadline:
                raise RuntimeError(say.demo_status_timeout(subtask_id, status, timeout))
            time.sleep(0.2)

    @staticmethod
    def wait_keeper(wt: Path, timeout: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while keeper.state(wt).get("running") and time.monotonic() < deadline:
            time.sleep(0.2)
        return keeper.state(wt)


def _first_line(text: Any) -> str:
    """The message's first sentence (a message wraps over lines; a sentence is never cut in the middle)."""
    lines = [line.strip().lstrip("- ") for line in str(text or "").splitlines()
             if line.strip() and not line.startswith("Mergebot refused")]
    joined = " ".join(lines)
    end = joined.find(". ")
    return (joined if end < 0 else joined[:end + 1])[:300]


def summary(c: Client, data_dir: Path, ids: dict[str, int]) -> None:
    """What happened, read from the records."""
    landed = c.get("/api/v1/landed", repo="calc")["landed"]
    print(tell.line("landed_heading"))
    print(render_table(landed, ("subtask_id", "owner", "claim_version", "merged_sha", "verifier_result",
                                "duration_ms")))
    cands = c.get("/api/v1/candidates", repo="calc", limit=200)["candidates"]
    verdicts = [c.get(f"/api/v1/candidates/{x['id']}")["verdict"] for x in cands if x["status"] == "rejected"]
    by_key = {v: k for k, v in ids.items()}
    print(tell.line("counts", candidates=len(cands), landed=len(landed), rejected=len(verdicts)))
    print(tell.line("happened_heading"))
    for v in verdicts:
        facts = v["paths"] if v["kind"] == "conflict" else v["failing_tests"]
        fixed = any(x["subtask_id"] == v["subtask_id"] for x in landed)
        print(tell.rejection(v["kind"], v["subtask_id"], by_key.get(v["subtask_id"], ""), facts, fixed))
    for key in ("mod", "div"):
        sid = ids[key]
        events = c.get(f"/api/v1/subtasks/{sid}/events")["events"]
        lapsed = [e for e in events if e["kind"] == "status" and e["from_status"] == "running"
                  and e["to_status"] == "ready" and (e["detail"] or {}).get("reason") == "lease expired"]
        refused = [e for e in events if e["kind"] == "push_refused"]
        notes = c.get(f"/api/v1/subtasks/{sid}/notes")["notes"]
        row = next((x for x in landed if x["subtask_id"] == sid), None)
        if lapsed:
            print(tell.lapsed_and_refused(sid, key, lapsed[0]["claim_version"],
                                          [(e["detail"].get("code"), e["claim_version"]) for e in refused]))
        handoffs = [n for n in notes if n["body"].startswith("## Handoff")]
        if handoffs and row:
            print(tell.line("handed_over", author=handoffs[0]["author"], subtask_id=sid, key=key,
                             owner=row["owner"], version=row["claim_version"]))
        kept = [n for n in notes if n["body"].startswith("[keeper]")]
        if kept and row:
            print(tell.line("kept_claim", subtask_id=sid, key=key, owner=row["owner"], version=row["claim_version"],
                             think=THINK, lease=LEASE, note=kept[-1]["body"].split(": ", 1)[-1]))
    main_log = subprocess.run(["git", "--git-dir", str(repos_root(data_dir) / "calc.git"), "log", "--oneline",
                               "--first-parent", "main"], capture_output=True, text=True, check=False).stdout
    print(tell.line("main_log", log=main_log))
    report = c.get("/api/v1/findings", repo="calc")["findings"]
    print(tell.findings(report))
