"""Security boundaries of what a caller sends, every test of which fails if its boundary breaks.

  * Bounded work: every pooled connection of request handling runs under ``statement_timeout`` (read from inside
    a request), bodies over the limit are 413 on every body-reading route, list limits are capped.
  * No shell: nothing in the package spawns one for git data; refs, commit messages, file names and push options
    full of shell metacharacters are pushed end to end without side effects; path traversal in repository names
    is refused by the git routes, the API and ``mergebot repo add``.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import Request
from fastapi.testclient import TestClient

import mergebot
from mergebot import agent as agent_mod
from mergebot.api import create_app
from mergebot.auth import Role
from mergebot.errors import Invalid
from mergebot.forge.sansio import MAX_BODY_BYTES
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.rules import Rules
from mergebot.settings import Settings
from tests.support.bot import Fleet, commit, git, make_project
from tests.support.security import Api, basic, concrete, raw_get, routes_of

PACKAGE = Path(mergebot.__file__).parent
ROOT = PACKAGE.parent


# ============================================================================================ bounded work

async def test_request_handling_runs_under_a_statement_timeout(settings: Settings) -> None:
    settings.statement_timeout_ms = 300
    app = create_app(settings, run_recovery=False, run_queue=False)

    @app.get("/__probe")
    async def probe(request: Request) -> dict[str, Any]:  # the pool every route handler uses
        pool = request.app.state.services.db.pool
        async with pool.connection() as conn:
            timeout = (await (await conn.execute("SHOW statement_timeout")).fetchone())[0]
            try:
                await conn.execute("SELECT pg_sleep(3)")
                canceled = False
            except Exception as e:  # psycopg.errors.QueryCanceled
                canceled = type(e).__name__ == "QueryCanceled"
        return {"timeout": timeout, "canceled": canceled}

    with TestClient(app) as client:
        got = [client.get("/__probe").json() for _ in range(3)]  # more than one pooled connection
    assert got == [{"timeout": "300ms", "canceled": True}] * 3


async def test_request_sizes_are_bounded(roles_api: Api) -> None:
    app = roles_api.client.app
    # Every list has a capped limit: asking for a million rows is refused, not served.
    limited = [(m, p) for m, p, route in routes_of(app) if m == "GET" and any(
        q.name == "limit" for q in route.dependant.query_params)]
    assert len(limited) >= 10
    for _, path in limited:
        r = roles_api.call("GET", concrete(path), "root", params={"limit": 1_000_000})
        assert r.status_code == 422 and r.json()["error"]["field"].endswith("limit"), (path, r.text)
    # Bodies over the limit are 413, whether declared or streamed, on the API and the hooks.
    big = b'{"title": "t", "description": "' + b"x" * 70_000 + b'"}'

    def chunks() -> Iterator[bytes]:
        yield big[:1000]
        for i in range(1000, len(big), 4096):
            yield big[i:i + 4096]

    for path in ("/api/v1/subtasks", "/api/v1/notes", "/internal/hooks/pre-receive", "/api/v1/subtasks/wait"):
        for content in (big, chunks()):
            r = roles_api.call("POST", path, "lead", content=content, headers={"Content-Type": "application/json"})
            assert r.status_code == 413 and r.json()["error"]["code"] == "too_large", (path, r.status_code)
    # Webhooks have the forge's own limit (25 MiB), refused on the declared length before reading.
    r = roles_api.client.post("/webhooks/github", content=b"x" * (MAX_BODY_BYTES + 1),
                              headers={"x-github-event": "ping"})
    assert r.status_code == 413
    # Lists inside bodies are capped too.
    r = roles_api.call("POST", "/api/v1/subtasks/wait", "rita", json={"ids": list(range(1, 1002)), "timeout": 0})
    assert r.status_code == 422 and r.json()["error"]["field"] == "ids"
    r = roles_api.call("POST", "/api/v1/subtasks", "lead", json={"title": "t", "depends_on": list(range(1, 1002))})
    assert r.status_code == 422 and r.json()["error"]["field"] == "depends_on"
    assert roles_api.call("GET", "/api/v1/status", "rita").json()["counts"] == {}  # and nothing was written


# ============================================================================================ no shell

FORBIDDEN = re.compile(r"shell\s*=\s*True|os\.system\s*\(|os\.popen\s*\(|create_subprocess_shell|"
                       r"commands\.getoutput|pty\.spawn")


def _sources() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(ROOT / "verifier").rglob("*.py")])


def test_nothing_in_the_package_runs_a_shell_on_data() -> None:
    sources = _sources()
    assert len(sources) > 40
    hits = [f"{p}:{i}" for p in sources for i, line in enumerate(p.read_text().splitlines(), 1)
            if FORBIDDEN.search(line)]
    assert hits == []
    # Every subprocess call gets an argument list (never a command string built from data).
    # subprocess.*: the first argument is a list (or a name bound to one), never a string made from data.
    # asyncio.create_subprocess_exec / os.exec*: the program is a fixed name and each argument is separate.
    lists = {"run", "Popen", "call", "check_call", "check_output"}
    execs = {"create_subprocess_exec", "execv", "execvp", "execvpe", "spawnv", "spawnvp"}
    calls = 0
    for p in sources:
        for node in ast.walk(ast.parse(p.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in ("subprocess", "asyncio", "os")):
                continue
            first = node.args[0] if node.args else None
            where = f"{p}:{node.lineno}"
            if node.func.attr in lists:
                calls += 1
                assert not isinstance(first, ast.Constant | ast.JoinedStr | ast.BinOp), where
            elif node.func.attr in execs:
                calls += 1
                assert not isinstance(first, ast.JoinedStr | ast.BinOp), where
                if isinstance(first, ast.Constant):
                    assert re.fullmatch(r"[\w./-]+", str(first.value)), where  # a program name, not a command
    assert calls >= 5
    # The hooks are shell scripts: git's ref lines are piped to curl, never interpolated into a command.
    for hook in (ROOT / "hooks").iterdir():
        text = hook.read_text()
        assert "--data-binary @-" in text and "eval" not in text and "read " not in text


async def test_shell_metacharacters_in_refs_messages_file_names_and_push_options(fleet: Fleet,
                                                                                   tmp_path: Path) -> None:
    trap = tmp_path / "trap"
    trap.mkdir()
    cmds = [f"$(touch${{IFS}}{trap}/d)", f"`touch${{IFS}}{trap}/b`", f";touch${{IFS}}{trap}/s;", f"|touch {trap}/p"]
    await fleet.db.subtasks.create_subtask(actor_id=None, title="$(touch /tmp/mb-title-trap) `id` ; rm -rf /")
    claim, wt = fleet.start("ann")
    # Refs: refused with a reason, nothing run.
    for c in cmds[:3]:
        out = git(["push", "origin", f"HEAD:refs/heads/{c}"], wt, check=False)
        assert out.returncode != 0 and "this ref is protected" in out.stderr, out.stderr
    # Push options: Mergebot does not read them; git refuses them before the push.
    out = git(["push", "-o", cmds[0], "-o", cmds[1], "origin", f"HEAD:refs/heads/{claim.branch}"], wt, check=False)
    assert out.returncode != 0 and "push options" in out.stderr
    # File names and a commit message full of metacharacters land like any other change.
    names = ["$(touch pwned-d).txt", "`touch pwned-b`.txt", "a;touch pwned-s;.txt", "x|touch pwned-p", "'q\".txt",
             "-rf", "--upload-pack=touch pwned-u"]
    commit(wt, {n: "data\n" for n in names} | {"calc.py": "def add(a, b):\n    return a + b\n# ok\n"},
           "\n".join(cmds) + "\n$(touch pwned-m) `touch pwned-m2`")
    result = agent_mod.push(fleet.client("ann"), wt, wait=90, progress=False)
    assert result["status"] == "landed", result
    landed_tree = fleet.bare()[fleet.main()].peel(__import__("pygit2").Commit).tree
    assert all(n in landed_tree for n in names)
    assert list(trap.iterdir()) == []
    for where in (tmp_path, Path(fleet.bot.data_dir)):  # the work trees, the repositories, the verifier's checkouts
        assert not list(where.rglob("pwned*")), where  # (no file pushed above starts with "pwned")
    assert not list(ROOT.glob("pwned*"))  # the server's working directory
    assert not Path("/tmp/mb-title-trap").exists()


# ============================================================================================ path traversal

TRAVERSALS = ["..", "../demo", "..%2fdemo", "%2e%2e", "%2e%2e%2fdemo", "demo.git/../..", "x.git/../../", "/etc/passwd",
              "%2Fetc%2Fpasswd", "demo/..", ".demo", "demo%00", "demo\n", "-demo", "demo.git", "..\\demo", "~root",
              "demo/../../outside"]


async def test_path_traversal_in_repository_names_is_refused(fleet: Fleet, tmp_path: Path) -> None:
    data = Path(fleet.bot.data_dir)
    outside = data / "outside.git"  # a repository next to the repos folder: must never be served
    subprocess.run(["git", "init", "-q", "--bare", str(outside)], check=True)
    token = fleet.tokens["ann"]
    auth_header = {"Authorization": basic(token)}
    targets = ["/git/../outside.git/info/refs", "/git/%2e%2e/outside.git/info/refs",
               "/git/..%2foutside.git/info/refs", "/git/%2e%2e%2foutside.git/info/refs",
               "/git/demo.git/../../outside.git/info/refs", "/git/demo.git/..%2f..%2foutside.git/info/refs",
               "/git//etc/passwd.git/info/refs", f"/git/{outside}/info/refs", "/git/repos/../outside.git/info/refs",
               "/git/demo.git/../info/refs", "/git/demo.git/objects/info/packs", "/git/demo.git/HEAD",
               "/git/demo.git/config", "/git/demo.git/hooks/pre-receive", "/git/.%2e/outside.git/info/refs",
               "/git/%2E%2E/outside.git/git-upload-pack"]
    for target in targets:
        for query in ("", "?service=git-upload-pack", "?service=git-receive-pack"):
            status, body = raw_get(fleet.bot.port, target + query, auth_header)
            assert status in (400, 404, 405), (target, status)
            assert b"refs/heads" not in body and b"[core]" not in body and b"curl" not in body
    assert raw_get(fleet.bot.port, "/git/demo.git/info/refs?service=git-upload-pack", auth_header)[0] == 200
    # The API takes repository names as data only (a database lookup), never as paths.
    _, root_token = await fleet.db.agents.add_agent(name="root", role=Role.ADMIN)
    for name in TRAVERSALS:
        quoted = httpx.URL(f"{fleet.bot.url}/api/v1/repos/x/pause").copy_with(
            raw_path=f"/api/v1/repos/{urllib.parse.quote(name, safe='%.~-')}/pause".encode())
        r = httpx.post(quoted, headers={"Authorization": f"Bearer {root_token}"})
        assert r.status_code in (404, 405, 422), (name, r.status_code)
        r = httpx.get(f"{fleet.bot.url}/api/v1/candidates", params={"repo": name},
                      headers={"Authorization": f"Bearer {token}"})
        assert r.status_code in (200, 422) and (r.status_code == 422 or r.json()["candidates"] == [])
    assert not (await fleet.db.repos.get_repo("demo")).paused
    # Adding a repository: the name is checked before anything touches the disk.
    root = repos_root(data)
    before = sorted(p.name for p in data.iterdir())
    src = make_project(tmp_path / "src-traversal")
    for name in [*TRAVERSALS, str(tmp_path / "abs"), "a" * 65, "", "demo\n"]:
        with pytest.raises(Invalid):
            await add_repo(fleet.db, root, name=name, source=str(src), rules=Rules.of(verifier_command="true"))
    assert sorted(p.name for p in data.iterdir()) == before and not (tmp_path / "abs.git").exists()
    assert sorted(p.name for p in root.iterdir()) == ["demo.git"]
    # ...and through the command line.
    env = {**os.environ, "MERGEBOT_DATABASE_URL": fleet.bot.db_url, "MERGEBOT_DATA_DIR": str(data)}
    for name in ("../evil", "x.git/../../evil", str(tmp_path / "evil")):
        out = subprocess.run([sys.executable, "-m", "mergebot", "repo", "add", name, "--from", str(src),
                              "--verifier", "true"], env=env, capture_output=True, text=True, check=False)
        assert out.returncode != 0 and "repository name" in (out.stdout + out.stderr), out.stderr[-500:]
    assert not (data / "evil.git").exists() and not (tmp_path / "evil.git").exists()
    assert not (data.parent / "evil.git").exists()
    assert sorted(p.name for p in root.iterdir()) == ["demo.git"]
