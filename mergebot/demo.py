"""``mergebot demo``: the whole landing path on one machine, as a new user first sees it.

In a temporary data directory it starts the bot on the embedded PostgreSQL, imports a small repository with a
real pytest suite, loads a task tree with dependencies, and lets simulated agents work it through the real HTTP
API and real ``git push`` over HTTP: they claim, commit and push; the bot verifies each merged commit and lands
it. Along the way the usual trouble happens: two agents append to the same changelog line and one is rejected
with a conflict (it rebases and pushes again), one pushes a bug and is rejected by the tests (it fixes and
pushes again), and one goes silent until its lease runs out — its subtask is handed to another agent and its
late push is refused as stale. The demo ends when the whole tree has landed, with a summary.
"""

from __future__ import annotations

import asyncio
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
from mergebot.api import create_app
from mergebot.auth import Role
from mergebot.client import Client
from mergebot.db.database import Database, open_database
from mergebot.landing.repos import add_repo, repos_root
from mergebot.settings import Settings
from mergebot.table import render_table

OPS = {
    "add": ("a + b", "add(2, 3) == 5"),
    "sub": ("a - b", "sub(5, 3) == 2"),
    "mul": ("a * b", "mul(4, 3) == 12"),
    "div": ("a / b", "div(8, 2) == 4"),
    "mod": ("a % b", "mod(7, 3) == 1"),
    "pow": ("a ** b", "pow(2, 5) == 32"),
}
TREE: list[dict[str, Any]] = [
    {"key": "calculator", "title": "A calculator with six operations", "children": [
        {"key": "add", "title": "Implement add", "priority": 5},
        {"key": "sub", "title": "Implement sub", "priority": 5},
        {"key": "mul", "title": "Implement mul", "depends_on": ["add"]},
        {"key": "div", "title": "Implement div", "depends_on": ["mul"]},
        {"key": "mod", "title": "Implement mod", "depends_on": ["sub"]},
        {"key": "pow", "title": "Implement pow", "depends_on": ["mul"]},
    ]},
]


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
        raise RuntimeError(f"git {args[0]}: {out.stderr}")
    return out


class Show:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.start = time.monotonic()

    def __call__(self, who: str, msg: str) -> None:
        with self.lock:
            print(f"[{time.monotonic() - self.start:5.1f}s] {who:>6}: {msg}", flush=True)


def run_demo(data_dir: Path | None = None, agents: int = 4) -> None:
    keep = data_dir is not None
    data_dir = data_dir or Path(tempfile.mkdtemp(prefix="mergebot-demo-"))
    settings = Settings(data_dir=data_dir, port=free_port(), lease_seconds=4, recovery_grace_seconds=1,
                        recovery_interval_seconds=0.5)
    show = Show()
    print(f"data directory: {data_dir} (embedded PostgreSQL unless MERGEBOT_DATABASE_URL is set)")
    src = data_dir / "seed-project"
    if not src.exists():
        make_project(src)
    names = ["ann", "bob", "cy", "zed"][: max(2, agents)]

    async def bootstrap(db: Database) -> dict[str, str]:
        tokens = {}
        for name, role in {"lead": Role.LEAD, **{n: Role.AGENT for n in names}}.items():
            try:
                _, tokens[name] = await db.agents.add_agent(name=name, role=role)
            except Exception:
                _, tokens[name] = await db.agents.rotate_token(name=name)
        if not any(r.name == "calc" for r in await db.landing.list_repos()):
            await add_repo(db, repos_root(data_dir), name="calc", source=str(src),
                           verifier_command=f"{sys.executable} -m pytest -q -p no:cacheprovider tests",
                           verifier_timeout_s=120, protected_paths=["tests/test_smoke.py"])
        return tokens

    async def prepared() -> dict[str, str]:
        async with open_database(settings) as db:
            return await bootstrap(db)

    tokens = asyncio.run(prepared())
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=settings.port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{settings.port}"
    print(f"server: {url}   repository: {url}/git/calc.git\n")
    try:
        _work(url, tokens, names, data_dir / "worktrees", show)
        _summary(Client(url, tokens["lead"]), data_dir)
    finally:
        server.should_exit = True
        thread.join(15)
        if not keep:
            shutil.rmtree(data_dir / "worktrees", ignore_errors=True)


def _write_op(wt: Path, op: str, buggy: bool) -> None:
    expr, check = OPS[op]
    if buggy:
        expr = "a + b + 1"
    (wt / "ops" / f"{op}.py").write_text(f"def {op}(a, b):\n    return {expr}\n")
    test = f"from ops.{op} import {op}\n\n\ndef test_{op}():\n    assert {check}\n"
    (wt / "tests" / f"test_{op}.py").write_text(test)
    with open(wt / "CHANGES.md", "a") as f:
        f.write(f"- {op}\n")  # every agent appends here: concurrent appends conflict


def _work(url: str, tokens: dict[str, str], names: list[str], root: Path, show: Show) -> None:
    lead = Client(url, tokens["lead"])
    lead.post("/api/v1/announcements", {"body": "Each operation: module, test, one CHANGES.md line."})
    made = lead.post("/api/v1/subtasks/batch", {"subtasks": TREE, "key_prefix": f"demo-{time.time_ns()}"})
    by_id = {v["id"]: k for k, v in made["subtasks"].items()}
    root_id = made["subtasks"]["calculator"]["id"]
    show("lead", f"created {len(by_id)} subtasks in a tree with dependencies")
    buggy_once = {"cy"}  # cy's first push has a bug the tests catch
    stale_once = {"zed"}  # zed goes silent on its first claim

    def agent_loop(name: str) -> None:
        c = Client(url, tokens[name])
        while True:
            if c.get(f"/api/v1/subtasks/{root_id}")["subtask"]["status"] == "landed":
                return
            wt = root / name
            got = agent.start(c, url, tokens[name], "calc", wt)
            if got is None:
                time.sleep(0.3)
                continue
            claim, _ = got
            key = by_id[claim.subtask_id]
            show(name, f"claimed #{claim.subtask_id} {key!r} v{claim.claim_version} -> {claim.branch}")
            if key == "calculator":  # the integration step: everything below landed; record it
                with open(wt / "CHANGES.md", "a") as f:
                    f.write("\nAll six operations landed.\n")
                _git(["commit", "-qam", "Calculator complete"], wt)
            elif name in stale_once:
                stale_once.discard(name)
                show(name, "goes silent (no heartbeats) ...")
                time.sleep(7)
                _write_op(wt, key, buggy=False)
                _git(["add", "-A"], wt)
                _git(["commit", "-qm", f"Add {key}"], wt)
                result = agent.push(c, wt, wait=60, progress=False)
                show(name, f"came back and pushed: {result['status']}: {_first_line(result.get('reason'))}")
                continue
            else:
                buggy = name in buggy_once
                buggy_once.discard(name)
                _write_op(wt, key, buggy=buggy)
                _git(["add", "-A"], wt)
                _git(["commit", "-qm", f"Add {key}" + (" (with a bug)" if buggy else "")], wt)
            for _ in range(6):
                result = agent.push(c, wt, wait=120, progress=False)
                status = result["status"]
                if status == "landed":
                    show(name, f"#{claim.subtask_id} {key!r} landed as {str(result['merged_sha'])[:10]}")
                    break
                show(name, f"#{claim.subtask_id} {status}: {_first_line(result.get('reason'))}")
                if status in ("superseded", "cancelled", "refused", "waiting"):
                    break
                _repair(wt, key, str(result.get("reason") or ""))
                show(name, "repaired it and pushes again")

    threads = [threading.Thread(target=agent_loop, args=(n,)) for n in names]
    for t in threads:
        t.start()
        time.sleep(0.2)
    for t in threads:
        t.join(600)


def _repair(wt: Path, key: str, reason: str) -> None:
    """What a real agent would do: rebase onto main, or fix the failing code, and commit again."""
    _git(["fetch", "-q", "origin"], wt)
    if "conflicts with" in reason:
        _git(["reset", "-q", "--hard", "origin/main"], wt)
        _write_op(wt, key, buggy=False)
        _git(["add", "-A"], wt)
        _git(["commit", "-qm", f"Add {key} (rebased onto main)"], wt)
    else:
        expr, _ = OPS[key]
        (wt / "ops" / f"{key}.py").write_text(f"def {key}(a, b):\n    return {expr}\n")
        _git(["commit", "-qam", f"Fix {key}"], wt)


def _first_line(text: Any) -> str:
    lines = [line for line in str(text or "").splitlines() if line.strip() and not line.startswith("Mergebot refused")]
    return (lines[0].strip().lstrip("- ") if lines else "")[:150]


def _summary(c: Client, data_dir: Path) -> None:
    landed = c.get("/api/v1/landed", repo="calc")["landed"]
    print("\nlanded, newest first:")
    print(render_table(landed, ("subtask_id", "owner", "claim_version", "merged_sha", "verifier_result",
                                "duration_ms")))
    cands = c.get("/api/v1/candidates", repo="calc", limit=200)["candidates"]
    rejected = [x for x in cands if x["status"] == "rejected"]
    print(f"\ncandidates: {len(cands)}, landed {len(landed)}, rejected {len(rejected)} "
          f"(conflicts and failing tests, each fixed and pushed again)")
    main_log = subprocess.run(["git", "--git-dir", str(repos_root(data_dir) / "calc.git"), "log", "--oneline",
                               "--first-parent", "main"], capture_output=True, text=True, check=False).stdout
    print("\nmain (first parent):\n" + main_log)
    report = c.get("/api/v1/findings", repo="calc")["findings"]
    print("reconciler findings: " + ("none: every commit on main is explained by a landed row" if not report
                                     else str(report)))
