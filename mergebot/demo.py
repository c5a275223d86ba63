"""``mergebot demo``: a real server on the embedded PostgreSQL, and simulated agents working a task tree.

Everything goes through the real HTTP API with real tokens: a lead loads a tree with dependencies, agents
claim, heartbeat, leave notes and submit; one agent goes silent mid-task, recovery hands its subtask back
after the lease and grace period, and the next owner reads the handoff. Landing (git, verifier) is not part
of this demo yet, so submitted work stays submitted and its dependents stay blocked.
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from mergebot.api import create_app
from mergebot.auth import Role
from mergebot.cli import render_table, with_store
from mergebot.client import ApiError, Client
from mergebot.settings import Settings
from mergebot.store import Store

TREE: list[dict[str, Any]] = [
    {"key": "sdk", "title": "SDK status filter", "children": [
        {"key": "contract", "title": "Write the filter contract", "priority": 10},
        {"key": "backend", "title": "Backend: query endpoint", "depends_on": ["contract"]},
        {"key": "frontend", "title": "Frontend: filter control", "depends_on": ["contract"]},
        {"key": "parse", "title": "Response parsing", "priority": 5},
        {"key": "request", "title": "Request construction", "priority": 5},
        {"key": "docs", "title": "Document the statuses", "priority": 1},
        {"key": "e2e", "title": "End-to-end tests", "depends_on": ["backend", "frontend"]},
    ]},
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_demo(data_dir: Path | None = None, agents: int = 4) -> None:
    data_dir = data_dir or Path(tempfile.mkdtemp(prefix="mergebot-demo-"))
    settings = Settings(data_dir=data_dir, port=free_port(), lease_seconds=1.5, recovery_grace_seconds=0.5,
                        recovery_interval_seconds=0.25)
    print(f"data directory: {data_dir} (embedded PostgreSQL unless MERGEBOT_DATABASE_URL is set)")

    async def bootstrap(store: Store) -> dict[str, str]:
        names = {"lead": Role.LEAD, "reviewer": Role.REVIEWER} | {f"agent{i}": Role.AGENT for i in range(agents)}
        tokens = {}
        for name, role in names.items():
            try:
                _, tokens[name] = await store.add_agent(name=name, role=role)
            except Exception:
                _, tokens[name] = await store.rotate_token(name=name)
        return tokens

    tokens = with_store(settings, bootstrap)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=settings.port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{settings.port}"
    while not server.started:
        time.sleep(0.05)
    print(f"server: {url}\n")
    try:
        _script(url, tokens, agents)
    finally:
        server.should_exit = True
        thread.join(10)


def _script(url: str, tokens: dict[str, str], agents: int) -> None:
    lead = Client(url, tokens["lead"])
    lead.post("/api/v1/announcements", {"body": "Plan: contract first; backend and frontend in parallel."})
    made = lead.post("/api/v1/subtasks/batch", {"subtasks": TREE, "key_prefix": f"demo-{time.time_ns()}"})
    ids = {k: v["id"] for k, v in made["subtasks"].items()}
    print(f"lead created {len(ids)} subtasks; ready ones: "
          f"{sorted(k for k, v in made['subtasks'].items() if v['status'] == 'ready')}")

    log: list[str] = []
    lock = threading.Lock()

    def say(msg: str) -> None:
        with lock:
            log.append(msg)
            print(msg)

    def work(name: str, silent: bool) -> None:
        c = Client(url, tokens[name])
        while True:
            got = c.post("/api/v1/subtasks/claim")
            if got is None:
                return
            h = got["handle"]
            title = got["subtask"]["title"]
            if got["handoff"]["notes"]:
                say(f"{name}: claimed #{h['id']} v{h['claim_version']} '{title}' and read the handoff: "
                    f"{got['handoff']['notes'][-1]['body']!r}")
            else:
                say(f"{name}: claimed #{h['id']} v{h['claim_version']} '{title}' (push to {got['branch']})")
            c.post(f"/api/v1/subtasks/{h['id']}/notes",
                   {"claim_version": h["claim_version"], "body": f"{name}: plan written, half done"})
            if silent:
                say(f"{name}: goes silent holding #{h['id']} (no more heartbeats)")
                time.sleep(3.0)
                try:
                    c.post(f"/api/v1/subtasks/{h['id']}/submit", {"claim_version": h["claim_version"]})
                except ApiError as e:
                    say(f"{name}: came back and tried to submit #{h['id']}: refused, {e.message}")
                return
            time.sleep(0.3)
            c.post(f"/api/v1/subtasks/{h['id']}/heartbeat", {"claim_version": h["claim_version"]})
            c.post(f"/api/v1/subtasks/{h['id']}/submit", {"claim_version": h["claim_version"]})
            say(f"{name}: submitted #{h['id']}")

    threads = [threading.Thread(target=work, args=(f"agent{i}", i == 0)) for i in range(agents)]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join()
    # The silent agent's subtask comes back after lease + grace; whoever is free picks it up.
    time.sleep(2.5)
    work("agent1", False)

    rev = Client(url, tokens["reviewer"])
    rows = rev.get("/api/v1/subtasks", limit=100)["subtasks"]
    print("\n" + render_table(rows, ("id", "status", "owner", "claim_version", "attempts", "title")))
    counts = rev.get("/api/v1/status")["counts"]
    print(f"\ncounts: {counts}")
    print("submitted work waits for the landing path (git push, verifier, merge to main): blocked subtasks "
          "stay blocked until their dependencies land.")
    asyncio.set_event_loop_policy(None)
