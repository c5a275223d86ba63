"""A hostile candidate, through the real path: real pushes whose tests attack, run by the real verifier under
bubblewrap, then everything an agent's token can read is searched for what the attack was after.

The server's data directory is outside ``/tmp`` (as in a real deployment), its environment holds a forge token and
a webhook secret, a credentials file sits in root's home and another in a user's home, and a repository's sandbox
path holds a file with the forge token in it (a leak by misconfiguration: the check may read it, its log must not
show it). Then, one push each:

  * **snoop**: prints its environment, every ``/proc/*/environ`` it can read, the credential files of the home
    directories, ``/etc/shadow`` and ``/etc``, the data directory, tries the database's socket and the server's
    TCP port on the host's loopback, and writes a hook into the bare repository (the data directory holds the key
    landing statements are signed with: its text is one more secret). The same script run outside the
    sandbox finds the secrets, so their absence inside means something;
  * **hog, time**: leaves a daemon behind, forks 2,000 times, allocates 8 GiB, sleeps past the timeout;
  * **hog, disk**: writes 3 GiB; **hog, memory**: four processes touch 400 MiB each (the repository allows 768);
  * **good**: a plain change, which lands.

Asserted: no secret and no planted file from outside the view in the API, the MCP tools or the pages; the
forge token read through the sandbox path shows as ``***``; the time hog ended within its timeout plus a grace,
the disk hog as ``disk_limit`` with the tmpfs it wrote never over the limit (watched from outside), the memory hog
as ``memory_limit``; no process, mount or control group of any run survives it; no hook was written; the server
answered ``/healthz`` throughout; and the good change landed after all of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from mergebot import agent
from mergebot.api import create_app
from mergebot.attest import keys
from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.rules import Rules
from mergebot.verify.worker import psycopg_hosts
from tests.support.bot import BotProcess, Fleet, check_command, commit, make_project, stop_keepers
from tests.support.security import routes_of
from tests.test_mcp import call, mcp_session
from verifier import disk, limits
from verifier import sandbox as sb

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not sb.bwrap_usable(),
                                reason="the hostile drill needs root and a usable bubblewrap (CI has both)")

TIMEOUT_S = 15  # the repository's check timeout: the time hog sleeps past it
GRACE_S = 10
DISK_LIMIT_MB = 256
MEMORY_LIMIT_MB = 768  # four processes of 400 MiB each are past it together, while each fits its address space
AGENTS = ("snoop", "hogtime", "hogdisk", "hogmem", "good")

SNOOP = r'''
import glob, json, os, socket, sys
CFG = json.loads(%(cfg)r)
out = []
def say(*a):
    out.append(" ".join(str(x) for x in a))
def read(path, n=400):
    try:
        with open(path, "rb") as f:
            return f.read(n).decode("utf-8", "replace")
    except OSError as e:
        return f"<{type(e).__name__}>"
def test_snoop():
    say("SNOOP env", json.dumps(dict(os.environ)))
    for p in glob.glob("/proc/[0-9]*/environ"):
        say("SNOOP proc", p, read(p, 4000).replace("\0", " "))
    for home in ["/root", "/home", *CFG["homes"]]:
        for folder, dirs, files in os.walk(home):
            if folder.count("/") - home.count("/") >= 4 or len(dirs) + len(files) > 300:
                dirs[:] = []
                continue
            for name in files:
                if any(k in name for k in ("credential", "hosts.yml", "netrc", "pgpass", "id_", "token")):
                    say("SNOOP home", os.path.join(folder, name), read(os.path.join(folder, name)))
    say("SNOOP shadow", read("/etc/shadow"), read("/etc/gshadow"))
    say("SNOOP etc", sorted(os.listdir("/etc")))
    data = CFG["data"]
    for folder, dirs, files in os.walk(data):
        if "slots" in dirs:
            dirs.remove("slots")  # its own checkout is in there
        for name in files:
            say("SNOOP data", os.path.join(folder, name), read(os.path.join(folder, name), 200))
    for sock in CFG["sockets"]:
        for path in glob.glob(os.path.join(sock, ".s.PGSQL.*")) + [sock]:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(2)
            try:
                s.connect(path)
                say("SNOOP socket REACHED", path)
            except OSError as e:
                say("SNOOP socket blocked", path, type(e).__name__)
            finally:
                s.close()
    try:
        socket.create_connection(("127.0.0.1", CFG["port"]), timeout=2).close()
        say("SNOOP tcp REACHED", CFG["port"])
    except OSError as e:
        say("SNOOP tcp blocked", type(e).__name__)
    hook = CFG["hook"]
    try:
        with open(hook, "w") as f:
            f.write("#!/bin/sh\necho owned\n")
        os.chmod(hook, 0o755)
        say("SNOOP hook WRITTEN", hook)
    except OSError as e:
        say("SNOOP hook refused", type(e).__name__)
    for leak in CFG["leaks"]:
        say("SNOOP leak", leak, read(leak))
    say("SNOOP done")
    print("\n".join(out))
    assert False, "snooped"
'''

HOG_TIME = r'''
import os, time
TOKEN = %(token)r
def sleeper(daemon=False):
    if daemon:
        os.setsid()
        if os.fork():
            os._exit(0)
    os.execve("/bin/sleep", ["sleep", "1000"], {"HOG": TOKEN})
def test_hog_time():
    if os.fork() == 0:
        sleeper(daemon=True)
    made = 0
    for _ in range(2000):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            sleeper()
        made += 1
    print("forked", made)
    try:
        b = bytearray(8 << 30)
        print("allocated 8 GiB", len(b))
    except MemoryError:
        print("8 GiB refused")
    time.sleep(1000)
'''

HOG_DISK = r'''
import os, time
def test_hog_disk():
    chunk = b"\0" * (16 << 20)
    written = 0
    for where in ("/tmp/big", "big-in-checkout", "/dev/shm/big"):
        try:
            with open(where, "wb") as f:
                while written < 3 << 30:
                    f.write(chunk)
                    written += len(chunk)
        except OSError as e:
            print("stopped at", written, e)
    time.sleep(1000)
'''

HOG_MEMORY = r'''
import os, time
def test_hog_memory():
    for _ in range(4):
        if os.fork() == 0:
            b = bytearray(400 << 20)
            for i in range(0, len(b), 4096):
                b[i] = 1
            time.sleep(1000)
            os._exit(0)
    time.sleep(1000)
'''


@dataclass
class Watch:
    """From outside, while the candidates run: /healthz, and the run filesystems' use."""

    url: str
    slots: Path
    stop: threading.Event = field(default_factory=threading.Event)
    health_worst: float = 0.0
    health_errors: list[str] = field(default_factory=list)
    health_checks: int = 0
    disk_peak: int = 0
    disk_seen: int = 0

    def run(self) -> None:
        with httpx.Client(timeout=10) as http:
            while not self.stop.is_set():
                t0 = time.monotonic()
                try:
                    r = http.get(f"{self.url}/healthz")
                    if r.status_code != 200:
                        self.health_errors.append(f"{r.status_code}: {r.text[:200]}")
                except httpx.HTTPError as e:
                    self.health_errors.append(repr(e))
                self.health_worst = max(self.health_worst, time.monotonic() - t0)
                self.health_checks += 1
                for point in disk.mounts_under(self.slots):
                    try:
                        st = os.statvfs(point)
                    except OSError:
                        continue
                    if st.f_blocks * st.f_frsize <= (DISK_LIMIT_MB + 1) << 20:  # a run's tmpfs
                        self.disk_seen += 1
                        self.disk_peak = max(self.disk_peak, (st.f_blocks - st.f_bfree) * st.f_frsize)
                time.sleep(0.1)


@dataclass
class Drill:
    fleet: Fleet
    data: Path
    secrets: dict[str, str]
    planted: list[Path]
    leak: Path
    hook: Path
    watch: Watch


@pytest.fixture
async def drill(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> AsyncIterator[Drill]:
    tag = uuid.uuid4().hex
    data = Path(f"/var/lib/mergebot-drill-{tag}")
    leakdir = Path(f"/var/lib/mergebot-drill-{tag}-leak")
    user_home = Path(f"/home/mbdrill-{tag}")
    secrets = {"forge_token": f"ghp_{uuid.uuid4().hex}", "webhook_secret": f"whsec_{uuid.uuid4().hex}",
               "root_credentials": f"root-cred-{uuid.uuid4().hex}", "user_credentials": f"user-cred-{uuid.uuid4().hex}",
               "data_marker": f"data-marker-{uuid.uuid4().hex}"}
    shadow = [line for line in Path("/etc/shadow").read_text().splitlines() if line.strip()]
    secrets.update({f"shadow{i}": line for i, line in enumerate(shadow) if len(line) >= 20})
    planted = [Path(f"/root/.git-credentials-drill-{tag}"), user_home / ".config" / "gh" / "hosts.yml",
               data / f"secret-{tag}.txt"]
    planted[0].write_text(f"https://ops:{secrets['root_credentials']}@github.com\n")
    planted[1].parent.mkdir(parents=True)
    planted[1].write_text(f"github.com:\n    oauth_token: {secrets['user_credentials']}\n")
    data.mkdir(parents=True)
    planted[2].write_text(secrets["data_marker"])
    leakdir.mkdir()
    (leakdir / "token.txt").write_text(f"token={secrets['forge_token']}\n")

    tokens: dict[str, str] = {}
    for name in AGENTS:
        _, tokens[name] = await e2e_db.agents.add_agent(name=name, role=Role.AGENT)
    _, tokens["lead"] = await e2e_db.agents.add_agent(name="lead", role=Role.LEAD)
    await add_repo(e2e_db, repos_root(data), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command=check_command(), verifier_timeout_s=TIMEOUT_S,
                   sandbox_paths=[str(leakdir)], disk_limit_mb=DISK_LIMIT_MB, memory_limit_mb=MEMORY_LIMIT_MB))
    for name in AGENTS:
        await e2e_db.subtasks.create_subtask(actor_id=None, title=f"{name}'s change")
    bot = BotProcess(e2e_db_url, data, GITHUB_TOKEN=secrets["forge_token"],
                     MERGEBOT_WEBHOOK_SECRET=secrets["webhook_secret"], MERGEBOT_RETRY_FAILED_CHECKS="0").start()
    # the key landing statements are signed with (issue 44), made by serve in the data directory: its base64 body
    secrets["signing_key"] = keys.key_path(data / "attest").read_text().splitlines()[1]
    watch = Watch(bot.url, data / "slots")
    watcher = threading.Thread(target=watch.run, daemon=True)
    watcher.start()
    try:
        yield Drill(Fleet(bot, e2e_db, tokens, tmp_path / "work"), data, secrets, planted, leakdir / "token.txt",
                    repos_root(data) / "demo.git" / "hooks" / "post-update", watch)
    finally:
        watch.stop.set()
        watcher.join(15)
        stop_keepers(tmp_path / "work")
        bot.stop()
        disk.sweep(data)
        for p in planted[:2]:
            p.unlink(missing_ok=True)
        shutil.rmtree(user_home, ignore_errors=True)
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(leakdir, ignore_errors=True)


def push(fleet: Fleet, who: str, files: dict[str, str]) -> dict[str, Any]:
    _, wt = fleet.start(who)
    commit(wt, files, f"{who}'s change")
    return agent.push(fleet.client(who), wt, wait=180, progress=False)


def survivors(token: str) -> list[int]:
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if f"HOG={token}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def own_groups(server_pid: int) -> list[Path]:
    return [d for base in set(limits.machine().bases.values())
            for d in base.glob(f"{limits.PREFIX}{server_pid}-*")]


async def readable_by_an_agent(fleet: Fleet, who: str, cands: list[int], subtasks: list[int]) -> dict[str, str]:
    """Everything the agent ``who`` can read: the API, the MCP tools, the pages (with the candidates and subtasks
    named, and every verify job's log)."""
    c = fleet.client(who)
    seen: dict[str, str] = {}
    jobs = c.get("/api/v1/verify-jobs", limit=200)["jobs"]
    landed = [r["id"] for r in c.get("/api/v1/landed", limit=200)["landed"]]
    # every GET route of the app, read from the app itself (so a new route is searched too), with every id named
    fill = {"subtask_id": subtasks, "cand_id": cands, "job_id": [j["id"] for j in jobs], "landed_id": landed}
    headers = {"Authorization": f"Bearer {fleet.tokens[who]}"}
    with httpx.Client(base_url=fleet.bot.url, timeout=30, headers=headers) as api:
        for method, path, _ in routes_of(create_app()):
            if method != "GET" or path.startswith(("/ui", "/docs", "/redoc")):
                continue
            names = re.findall(r"{(\w+)}", path)
            if any(n not in fill for n in names):
                continue  # a route keyed by something else (a repository's git, a static file)
            for ids in ([{}] if not names else [{names[0]: i} for i in fill[names[0]]]):
                url = path.format(**ids)
                got = api.get(url, params={"limit": 200} if not names else None)
                seen[url] = got.text
    assert "/api/v1/landed" in seen and "/metrics" in seen and f"/api/v1/candidates/{cands[0]}" in seen, sorted(seen)
    for cid in cands:
        seen[f"/api/v1/candidates/{cid}"] = json.dumps(c.get(f"/api/v1/candidates/{cid}"))
    async with mcp_session(fleet, who) as session:
        for sid in subtasks:
            seen[f"mcp verdict {sid}"] = json.dumps(await call(session, "verdict", subtask_id=sid))
        seen["mcp read_board"] = json.dumps(await call(session, "read_board"))
        seen["mcp ready_work"] = json.dumps(await call(session, "ready_work"))
        for cid in cands:  # each push's own verdict, by (subtask, commit)
            cand = c.get(f"/api/v1/candidates/{cid}")
            told = await call(session, "wait_for_verdict", subtask_id=cand["subtask_id"], sha=cand["sha"], timeout=0)
            assert told.get("candidate_id") == cid, told  # it read that push's verdict, not an error
            seen[f"mcp wait_for_verdict {cid}"] = json.dumps(told)
        # the other tools act (claim, push, renew, release, write a note): what they answer is what these read
        tools = {t.name for t in (await session.list_tools()).tools}
        # a new tool that reads must be read here too
        assert tools == {"verdict", "read_board", "ready_work", "claim_and_start", "submit_and_wait", "heartbeat",
                         "release", "note", "handoff", "wait_for_verdict"}, tools
        prompt = await session.get_prompt("work_a_subtask", {"repo": "demo", "dir": "wt"})
        seen["mcp prompt"] = json.dumps([m.model_dump(mode="json") for m in prompt.messages])
        guide = await session.read_resource("mergebot://guide")  # type: ignore[arg-type]
        seen["mcp guide"] = "".join(getattr(c, "text", "") for c in guide.contents)
    base = fleet.bot.url
    async with httpx.AsyncClient(base_url=base, timeout=30) as web:
        r = await web.post("/login", data={"token": fleet.tokens[who], "next": "/ui/queue"},
                           headers={"Origin": base})
        assert r.status_code == 303, r.text
        pages = []  # every page of the app, with every id named (the static files and the live streams aside)
        for method, path, _ in routes_of(create_app()):
            names = re.findall(r"{(\w+)}", path)
            if method != "GET" or not path.startswith("/ui") or path.endswith("/events") or \
                    any(n not in fill for n in names):
                continue
            pages += [path] if not names else [path.format(**{names[0]: i}) for i in fill[names[0]]]
        held = {f"/ui/jobs/{j['id']}/log" for j in jobs if j["purpose"] == "held_out"}
        assert "/ui/queue" in pages and f"/ui/candidates/{cands[0]}" in pages, pages
        for page in pages:
            got = await web.get(page)
            # a held-out run's log is refused; so are an admin's pages to an agent, and their text is searched too
            assert got.status_code in ((403,) if page in held else (200, 403)), (page, got.status_code)
            seen[page] = got.text
    return seen


async def test_a_hostile_candidate_reaches_no_secret_and_no_limit_holds_it_back(drill: Drill) -> None:
    d, fleet = drill, drill.fleet
    cfg = {"homes": [str(d.planted[1].parents[2])], "data": str(d.data), "port": fleet.bot.port,
           "sockets": psycopg_hosts(fleet.bot.db_url), "hook": str(d.hook), "leaks": [str(d.leak)]}
    snoop = SNOOP % {"cfg": json.dumps(cfg)}
    # The control: the same snoop, run outside the sandbox with the server's environment, finds the secrets.
    control = subprocess.run([sys.executable, "-c", snoop + "\ntry:\n    test_snoop()\nexcept AssertionError:\n"
                              "    pass\n"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "GITHUB_TOKEN": d.secrets["forge_token"]})
    for key in ("forge_token", "root_credentials", "user_credentials", "data_marker", "signing_key"):
        assert d.secrets[key] in control.stdout, f"the snoop cannot find {key} even outside the sandbox"
    d.hook.unlink(missing_ok=True)  # the control wrote it: the sandboxed run must not
    hooks_before = sorted(p.name for p in d.hook.parent.iterdir())

    hog_token = uuid.uuid4().hex
    verdicts: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    for who, files in (("snoop", {"tests/test_snoop.py": snoop}),
                       ("hogtime", {"tests/test_hog_time.py": HOG_TIME % {"token": hog_token}}),
                       ("hogdisk", {"tests/test_hog_disk.py": HOG_DISK}),
                       ("hogmem", {"tests/test_hog_memory.py": HOG_MEMORY})):
        verdicts[who] = await asyncio.to_thread(push, fleet, who, files)
    verdicts["good"] = await asyncio.to_thread(push, fleet, "good", {"notes.txt": "a good change\n"})
    drill_s = time.monotonic() - started

    kinds = {who: (v.get("verdict") or {}).get("kind") for who, v in verdicts.items()}
    expected_memory = "memory_limit" if limits.machine().has("memory") else "check_failed"
    assert kinds == {"snoop": "check_failed", "hogtime": "check_timeout", "hogdisk": "disk_limit",
                     "hogmem": expected_memory, "good": "landed"}, (kinds, verdicts)

    # the operator's view of that sandbox, from the command line: the same view, the sandbox path in it
    explained = subprocess.run([sys.executable, "-m", "mergebot", "verify", "--repo", "demo", "--explain-sandbox"],
                               env={**os.environ, "MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens["lead"],
                                    "MERGEBOT_DATA_DIR": str(d.data)}, capture_output=True, text=True, timeout=60)
    said = explained.stdout
    assert explained.returncode == 0 and "what a check sees" in said, explained.stderr
    assert f"{d.leak.parent}" in said and "[sandbox path]" in said and "/etc/passwd" in said, said
    assert "/etc/shadow" not in said and "disk=tmpfs" in said and f"disk {DISK_LIMIT_MB} MiB" in said, said

    # what ran: the snoop's own report reached the agent (so a secret it found would have too)
    snoop_cand = fleet.client("snoop").get(f"/api/v1/candidates/{verdicts['snoop']['id']}")
    log = (snoop_cand["verifier"].get("log_head") or "") + (snoop_cand["verifier"].get("log_tail") or "")
    # (read as printed lines: pytest's report also shows the test's source, with every one of these words in it)
    printed = [line for line in log.splitlines() if line.startswith("SNOOP ")]
    for start in ("SNOOP env {", "SNOOP shadow <", "SNOOP tcp blocked ", "SNOOP hook refused ", "SNOOP done"):
        assert any(line.startswith(start) for line in printed), (start, log[-3000:])
    assert not [line for line in printed if " REACHED" in line or line.startswith(("SNOOP data ", "SNOOP home "))]
    assert f"SNOOP leak {d.leak} token=***" in printed, printed  # the sandbox path's content, the token masked
    assert sorted(p.name for p in d.hook.parent.iterdir()) == hooks_before and not d.hook.exists()

    # the hogs: ended by their limits, within the timeout plus a grace; nothing of them survived
    runs = {who: fleet.client(who).get(f"/api/v1/candidates/{v['id']}")["verifier"]
            for who, v in verdicts.items() if who.startswith("hog")}
    assert runs["hogtime"]["duration_ms"] <= (TIMEOUT_S + GRACE_S) * 1000, runs["hogtime"]
    assert runs["hogdisk"]["limits"]["disk_peak_bytes"] <= DISK_LIMIT_MB << 20, runs["hogdisk"]["limits"]
    assert "disk=tmpfs" in runs["hogdisk"]["limits"]["enforced"]
    assert d.watch.disk_seen > 0 and d.watch.disk_peak <= DISK_LIMIT_MB << 20, (d.watch.disk_seen, d.watch.disk_peak)
    assert survivors(hog_token) == []
    assert disk.mounts_under(d.data / "slots") == []
    assert fleet.bot.proc is not None and own_groups(fleet.bot.proc.pid) == []
    assert d.watch.health_errors == [] and d.watch.health_checks > 10, d.watch.health_errors
    assert d.watch.health_worst < 5.0, d.watch.health_worst  # it answered throughout (the drill took drill_s)

    # nothing an agent can read holds a secret or a planted file's name
    subtasks = [v["subtask_id"] for v in verdicts.values()]
    cands = [v["id"] for v in verdicts.values()]
    seen = await readable_by_an_agent(d.fleet, "snoop", cands, subtasks)
    leaks = {(where, key) for where, text in seen.items() for key, value in d.secrets.items() if value in text}
    # (the snoop was told where to look, so its source names the directories, never the planted files' paths)
    leaks |= {(where, str(p)) for where, text in seen.items() for p in d.planted if str(p) in text}
    assert not leaks, sorted(leaks)
    assert any("SNOOP done" in text for text in seen.values())  # the snoop's log is among what was searched
    assert drill_s < 240, drill_s
