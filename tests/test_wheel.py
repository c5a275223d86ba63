"""An installed copy, not the source tree, hosts a repository (issue 42): a wheel built from the tree and installed
without ``-e`` into a fresh virtual environment serves a real ``git push`` through its hooks to a landing.

Offline: the wheel is built with this environment's setuptools when it can build one (``--no-build-isolation
--no-index``), and the fresh environment gets its dependencies from this one's site-packages through a ``.pth``
file: a plain path line adds that folder to ``sys.path`` without processing the ``.pth`` files in it, so the
editable ``mergebot`` installed there is not importable, which the test checks before the wheel goes in. Every
process of the installed copy runs without ``PYTHONPATH``, from a directory outside the tree.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import time
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest

from mergebot import agent
from mergebot.client import Client
from mergebot.db.embedded import alive
from mergebot.git import repo as gitrepo
from mergebot.landing.main.repos import repos_root
from tests.support.bot import BotProcess, commit, git, make_project

ROOT = Path(__file__).resolve().parent.parent
BUILD_INPUTS = ("pyproject.toml", "README.md", "mergebot", "verifier", "hooks")  # what the wheel is built from
NOT_INSTALLED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")  # the test's, not the copy's
PROBE = """import importlib.util, json, sysconfig
def origin(name):  # found, not imported: what the server imports is told by the byte code it leaves
    found = importlib.util.find_spec(name)
    return found.origin if found else None
print(json.dumps({"mergebot": origin("mergebot"), "pygit2": origin("pygit2"), "site": sysconfig.get_path("purelib")}))
"""


def _builds_offline() -> bool:
    """Whether this environment's setuptools builds wheels itself (70.1 and later), so nothing is downloaded."""
    major, minor = (int(x) for x in importlib.metadata.version("setuptools").split(".")[:2])
    return (major, minor) >= (70, 1)


def build_wheel(work: Path) -> Path:
    """A wheel of the tree, built from a copy of it (a build writes ``build/`` and ``*.egg-info`` where it runs)."""
    src = work / "src"
    src.mkdir(parents=True)
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():  # symbolic links stay links: mergebot/git/hooks is the top-level hooks/ folder
            shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    offline = ["--no-build-isolation", "--no-index"] if _builds_offline() else []  # else: the declared setuptools
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", *offline, "-w",
                          str(work / "dist"), str(src)], capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (work / "dist").glob("mergebot-*.whl")
    return wheel


def fresh_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in NOT_INSTALLED}


def probe(python: Path, cwd: Path) -> dict[str, Any]:
    out = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, env=fresh_env(), cwd=cwd,
                         check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def test_the_hooks_are_the_packages_and_copied_executable(tmp_path: Path) -> None:
    for name in gitrepo.HOOK_NAMES:  # the package's hooks are the top-level folder's, not a copy that drifts
        assert (gitrepo.HOOKS / name).read_bytes() == (ROOT / "hooks" / name).read_bytes()
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "pre-receive").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "hooks" / "pre-receive").chmod(0o600)  # what a previous, unexecutable copy left
    gitrepo.install_hooks(tmp_path)
    for name in gitrepo.HOOK_NAMES:
        installed = tmp_path / "hooks" / name
        assert installed.read_bytes() == (ROOT / "hooks" / name).read_bytes()
        assert stat.S_IMODE(installed.stat().st_mode) == 0o755


def test_a_wheel_installed_without_editable_lands_a_real_push(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "build")
    with zipfile.ZipFile(wheel) as z:
        for name in gitrepo.HOOK_NAMES:
            assert z.read(f"mergebot/git/hooks/{name}") == (ROOT / "hooks" / name).read_bytes()
        assert not any(n.startswith(("hooks/", "tests/")) for n in z.namelist())  # inside the package only

    # A fresh environment that sees this one's dependencies, but not its editable mergebot.
    env_dir, outside = tmp_path / "venv", tmp_path / "outside"
    outside.mkdir()
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(probe(python, outside)["site"])
    assert site.is_relative_to(env_dir)
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site / "dev-dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    before = probe(python, outside)
    assert before["mergebot"] is None, before  # the .pth files beside pygit2 (the editable install) did not run
    assert Path(before["pygit2"]).parent.parent in {Path(p) for p in ours}

    # The wheel, not editable, without dependencies and without byte code: what imports it leaves byte code behind.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", "--no-compile", str(wheel)], check=True, capture_output=True, timeout=300)
    installed = site / "mergebot"
    assert probe(python, outside)["mergebot"] == str(installed / "__init__.py")
    for hook in (installed / "git" / "hooks").iterdir():  # as if the wheel had kept no mode: install_hooks sets it
        hook.chmod(0o644)

    data = tmp_path / "data"
    mergebot = [str(env_dir / "bin" / "mergebot")]  # the wheel's console script
    bot = BotProcess("", data, program=mergebot, cwd=outside, unset=NOT_INSTALLED)  # the embedded PostgreSQL
    byte_code = set(installed.rglob("*.pyc"))
    pidfile = data / "pg" / "postmaster.pid"
    try:
        bot.start()
        assert bot.proc is not None
        argv = Path(f"/proc/{bot.proc.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[:3] == [str(python).encode(), mergebot[0].encode(), b"serve"], argv
        assert (installed / "api" / "__pycache__").is_dir() and set(installed.rglob("*.pyc")) > byte_code, (
            "the server imported no module of the installed copy")

        def cli(*args: str) -> Any:  # the installed copy's commands on its data directory
            env = {**fresh_env(), "MERGEBOT_DATA_DIR": str(data)}
            out = subprocess.run([*mergebot, *args, "--json"], capture_output=True, text=True, env=env, cwd=outside,
                                 check=False, timeout=180)
            assert out.returncode == 0, (args, out.stdout, out.stderr)
            return json.loads(out.stdout)

        admin = cli("init")["token"]
        ann = cli("agent", "add", "ann")["token"]
        check = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q -p no:cacheprovider tests"
        cli("repo", "add", "demo", "--from", str(make_project(tmp_path / "project")), "--verifier", check,
            "--timeout", "60", *(f"--sandbox-path={p}" for p in sorted(ours)))  # the copy's python reads its .pth
        for name in gitrepo.HOOK_NAMES:
            assert os.access(repos_root(data) / "demo.git" / "hooks" / name, os.X_OK)

        # The agent's side as in the other end-to-end tests: claim, clone and push over HTTP with the real git.
        Client(bot.url, admin).post("/api/v1/subtasks", {"title": "subtract, from an installed copy"})
        got = agent.start(Client(bot.url, ann), bot.url, ann, "demo", tmp_path / "work")
        assert got is not None
        claim, wt = got[0], tmp_path / "work"
        commit(wt, {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"}, "subtract")
        result = agent.push(Client(bot.url, ann), wt, wait=120, progress=False)
        assert result["status"] == "landed", result

        (row,) = Client(bot.url, ann).landed()
        assert row["subtask_id"] == claim.subtask_id and row["repo"] == "demo"
        git(["fetch", "-q", "origin", "main"], wt)
        main = git(["rev-parse", "FETCH_HEAD"], wt).stdout.strip()
        assert main == row["merged_sha"]
        assert "def sub(a, b)" in git(["show", f"{main}:calc.py"], wt).stdout
    finally:
        postmaster = int(pidfile.read_text().split()[0]) if pidfile.exists() else None
        bot.stop()
        deadline = time.monotonic() + 15  # the last user's clean stop stops the embedded PostgreSQL
        while postmaster is not None and alive(postmaster) and time.monotonic() < deadline:
            time.sleep(0.1)
        if postmaster is not None and alive(postmaster):
            os.kill(postmaster, signal.SIGINT)  # a fast shutdown: no server outlives its test
            pytest.fail(f"the embedded PostgreSQL {postmaster} outlived the server")
