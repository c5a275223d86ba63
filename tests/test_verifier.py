"""The verifier against real repositories and real checks: outcomes, sandbox, limits, slots, logs.

Every test builds its repositories in ``tmp_path`` with pygit2 and runs real commands (real pytest suites
among them). Tests that need bubblewrap run only where ``verifier.sandbox.bwrap_usable()`` (CI installs it),
and are skipped with the reason otherwise; tests of the process limit need a writable pids cgroup.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest
from pygit2.enums import FileMode

from verifier import sandbox as sb
from verifier.runner import LOG_HEAD, LOG_TAIL, CheckSpec, Result, run_check
from verifier.supervise import Stop

PY = sys.executable
BWRAP = pytest.mark.skipif(not sb.bwrap_usable(), reason=f"bwrap sandbox not usable here: {sb.bwrap_problem()}")
PIDS = pytest.mark.skipif(not sb.process_limit_available(), reason="no writable pids cgroup (needs root)")
BOTH = pytest.mark.parametrize("sandbox", ["none", pytest.param("bwrap", marks=BWRAP)])

Files = dict[str, bytes | tuple[bytes, FileMode]]

PASSING_SUITE: Files = {
    "calc/__init__.py": b"def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": b"from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
                          b"def test_tmp(tmp_path):\n    (tmp_path / 'x').write_text('ok')\n",
    "pyproject.toml": b"[tool.pytest.ini_options]\npythonpath = ['.']\n",
    "run.sh": (b"#!/bin/sh\necho run\n", FileMode.BLOB_EXECUTABLE),
}


class Repo:
    """A bare repository in tmp_path; each ``commit`` replaces the whole tree with ``files``."""

    def __init__(self, path: Path) -> None:
        self.repo = pygit2.init_repository(str(path), bare=True)
        self.path = path
        self.head: pygit2.Oid | None = None

    def commit(self, files: Files, message: str = "commit") -> str:
        index = pygit2.Index()
        for name, content in files.items():
            data, mode = content if isinstance(content, tuple) else (content, FileMode.BLOB)
            index.add(pygit2.IndexEntry(name, self.repo.create_blob(data), mode))
        tree = index.write_tree(self.repo)
        sig = pygit2.Signature("Test", "test@example.com", 1_700_000_000, 0)
        self.head = self.repo.create_commit("refs/heads/main", sig, sig, message, tree,
                                            [self.head] if self.head else [])
        return str(self.head)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path / "src.git")


@pytest.fixture
def slot(tmp_path: Path) -> Path:
    return tmp_path / "slot"


def check(repo: Repo, sha: str, command: str, *, slot: Path | None, sandbox: str, timeout: float = 60,
          **kw: int) -> Result:
    spec = {k: v for k, v in kw.items() if k in CheckSpec.__dataclass_fields__}
    result = run_check(repo.path, sha, CheckSpec(command, timeout, **spec), slot=slot, sandbox=sandbox,  # type: ignore[arg-type]
                       **{k: v for k, v in kw.items() if k not in spec})
    assert result.sandbox == sandbox
    return result


def log_of(result: Result) -> str:
    return result.log_head + result.log_tail


def processes_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if token.encode() in cmdline:
                found.append(int(entry))
    return found


def wait_gone(token: str, seconds: float = 3.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := processes_with(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def untracked_in(slot: Path, files: Files) -> set[str]:
    tree = slot / "tree"
    present = {str(p.relative_to(tree)) for p in tree.rglob("*") if not p.is_dir()}
    return present - set(files)


# -- outcomes on real pytest suites --------------------------------------------------------------------------

@BOTH
def test_real_pytest_suite_passes_then_fails(repo: Repo, slot: Path, sandbox: str) -> None:
    good = repo.commit(PASSING_SUITE)
    failing = dict(PASSING_SUITE, **{"calc/__init__.py": b"def add(a, b):\n    return a - b\n"})
    bad = repo.commit(failing)
    command = f"{PY} -m pytest -q tests && ./run.sh"  # with the cache provider: it writes .pytest_cache

    first = check(repo, good, command, slot=slot, sandbox=sandbox)
    assert first.outcome == "pass", log_of(first)
    assert first.exit_code == 0 and "2 passed" in first.log_head and "run" in first.log_head
    assert first.tree_sha == str(repo.repo[good].peel(pygit2.Commit).tree_id)
    assert first.commit_sha == good and len(first.log_digest) == 64

    second = check(repo, bad, command, slot=slot, sandbox=sandbox)
    assert second.outcome == "fail" and second.exit_code == 1
    assert "assert -1 == 5" in second.excerpt(40)
    assert second.tree_sha == str(repo.repo[bad].peel(pygit2.Commit).tree_id)
    assert json.loads(json.dumps(second.as_json()))["outcome"] == "fail"
    assert untracked_in(slot, failing) == set()  # .pytest_cache and friends did not stay
    # a log this short has no tail apart from its head: the failing test is still named, from pytest's summary
    assert second.log_tail == "" and second.failing_tests_from == "log"
    assert [t for t in second.failing_tests if t.endswith("test_add")], second.failing_tests


@BOTH
def test_temporary_checkout_when_no_slot(repo: Repo, sandbox: str) -> None:
    sha = repo.commit({"a.txt": b"hello\n"})
    result = check(repo, sha, "cat a.txt", slot=None, sandbox=sandbox)
    assert result.outcome == "pass" and result.log_head == "hello\n"


def test_unknown_commit_is_an_error(repo: Repo, slot: Path) -> None:
    repo.commit({"a.txt": b"a"})
    result = run_check(repo.path, "0" * 40, CheckSpec("true", 10), slot=slot, sandbox="none")
    assert result.outcome == "error" and "could not prepare the check" in result.log_head


def test_sandbox_is_recorded(repo: Repo, slot: Path) -> None:
    sha = repo.commit({"a.txt": b"a"})
    assert run_check(repo.path, sha, CheckSpec("true", 10), slot=slot, sandbox="none").sandbox == "none"
    auto = run_check(repo.path, sha, CheckSpec("true", 10), slot=slot, sandbox="auto")
    assert auto.passed and auto.sandbox == ("bwrap" if sb.bwrap_usable() else "none")
    # bwrap, or refused: never silently without it
    default = run_check(repo.path, sha, CheckSpec("true", 10), slot=slot)
    assert default.sandbox == "bwrap" and default.passed == sb.bwrap_usable()
    with pytest.raises(ValueError):
        run_check(repo.path, sha, CheckSpec("true", 10), slot=slot, sandbox="docker")


@BOTH
def test_death_by_signal_is_a_failure(repo: Repo, slot: Path, sandbox: str) -> None:
    sha = repo.commit({"a.txt": b"a"})
    result = check(repo, sha, "kill -9 $$", slot=slot, sandbox=sandbox)
    assert result.outcome == "fail" and result.exit_code == 137


# -- time limit and leftovers ------------------------------------------------------------------------------

@BOTH
@pytest.mark.parametrize("quiet", [False, True], ids=["talking", "output-closed"])
def test_timeout_kills_the_whole_tree(repo: Repo, slot: Path, sandbox: str, quiet: bool) -> None:
    sha = repo.commit({"a.txt": b"a"})
    token = f"1000.{uuid.uuid4().int % 10**9:09d}"
    escape = f"setsid sleep {token}1 & " if sb.process_limit_available() else ""  # leaves the process group
    close = "exec >/dev/null 2>&1; " if quiet else ""  # the log ends long before the check does
    command = f"echo started; {close}sh -c 'sleep {token}' & {escape}sleep {token}2"
    t0 = time.monotonic()
    # 3 s: room for bubblewrap to start and the first line to be written on a machine whose cores are busy (with
    # 1 s, a loaded machine's sandbox was still starting when the time limit struck, and the log was empty)
    result = check(repo, sha, command, slot=slot, sandbox=sandbox, timeout=3.0)
    assert result.outcome == "timeout" and result.exit_code is None
    assert time.monotonic() - t0 < 12
    assert result.log_head == "started\n"
    assert wait_gone(token) == []


@BOTH
def test_background_processes_do_not_outlive_a_passing_check(repo: Repo, slot: Path, sandbox: str) -> None:
    sha = repo.commit({"a.txt": b"a"})
    token = f"1000.{uuid.uuid4().int % 10**9:09d}"
    t0 = time.monotonic()
    result = check(repo, sha, f"sleep {token} & echo done", slot=slot, sandbox=sandbox)
    assert result.outcome == "pass" and result.log_head == "done\n"
    assert time.monotonic() - t0 < 10  # the background sleep holds the log pipe: it is killed, not waited for
    assert wait_gone(token) == []


@BOTH
def test_a_stopped_check_is_killed_at_once_and_is_no_verdict(repo: Repo, slot: Path, sandbox: str) -> None:
    """A cancelled run is stopped from another thread: the whole tree is killed (the command after the sleep
    never runs), the outcome is an error that says why, and the slot is clean for the next run."""
    sha = repo.commit({"a.txt": b"a"})
    token = f"1000.{uuid.uuid4().int % 10**9:09d}"
    marker = slot.parent / "after-the-sleep"
    stop = Stop()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    try:
        t0 = time.monotonic()
        result = check(repo, sha, f"echo started; sleep {token}; touch {marker}", slot=slot, sandbox=sandbox,
                       timeout=120, stop=stop)  # type: ignore[arg-type]
        took = time.monotonic() - t0
    finally:
        timer.cancel()
        stop.close()
    assert result.outcome == "error" and result.exit_code is None
    assert log_of(result).startswith("stopped: the run was cancelled") and "started" in log_of(result)
    assert took < 30  # the sleep is 1000 s long: it was killed, not waited for
    assert wait_gone(token) == [] and not marker.exists()
    assert check(repo, sha, "cat a.txt", slot=slot, sandbox=sandbox).outcome == "pass"


def test_a_check_stopped_before_it_starts_does_not_run(repo: Repo, slot: Path, tmp_path: Path) -> None:
    sha = repo.commit({"a.txt": b"a"})
    marker = tmp_path / "ran"
    stop = Stop()
    stop.set()
    try:
        result = check(repo, sha, f"touch {marker}", slot=slot, sandbox="none", stop=stop)  # type: ignore[arg-type]
    finally:
        stop.close()
    assert result.outcome == "error" and result.log_head.startswith("stopped:") and not marker.exists()


# -- sandbox: network, filesystem, environment ---------------------------------------------------------------

NET_PROBE = """
import socket, sys
port, unix_path = int(sys.argv[1]), sys.argv[2]
def attempt(name, fn):
    try:
        fn()
        print(name, "REACHED")
    except OSError as e:
        print(name, "blocked", type(e).__name__)
def tcp():
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
def unix():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(3)
    s.connect(unix_path)
    s.close()
def dns():
    socket.getaddrinfo("example.com", 80)
attempt("tcp", tcp)
attempt("unix", unix)
attempt("dns", dns)
"""


@pytest.fixture
def listeners() -> Iterator[tuple[int, str]]:
    """A TCP listener on 127.0.0.1 and a Unix socket outside /tmp (so not hidden by the private /tmp)."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    where = Path(tempfile.mkdtemp(prefix="mb-verifier-sock-", dir="/var/tmp"))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(where / "s.sock"))
    unix.listen(8)
    try:
        yield tcp.getsockname()[1], str(where / "s.sock")
    finally:
        tcp.close()
        unix.close()
        (where / "s.sock").unlink(missing_ok=True)
        where.rmdir()


@BWRAP
def test_network_is_unreachable_in_the_sandbox(repo: Repo, slot: Path, listeners: tuple[int, str]) -> None:
    port, unix_path = listeners
    sha = repo.commit({"probe.py": NET_PROBE.encode()})
    command = f"{PY} probe.py {port} {unix_path}"
    inside = check(repo, sha, command, slot=slot, sandbox="bwrap")
    assert inside.outcome == "pass", inside.log_head
    assert "tcp blocked" in inside.log_head and "unix blocked" in inside.log_head, inside.log_head
    assert "dns blocked" in inside.log_head, inside.log_head
    # The same probe without the sandbox reaches both listeners, so the test itself can tell.
    outside = check(repo, sha, command, slot=slot, sandbox="none")
    assert "tcp REACHED" in outside.log_head and "unix REACHED" in outside.log_head, outside.log_head


WRITE_PROBE = """
import sys
for target in sys.argv[1:]:
    try:
        with open(target, "w") as f:
            f.write("escaped")
        print("wrote", target)
    except OSError as e:
        print("refused", target, e.strerror)
"""


@BWRAP
def test_writes_outside_the_checkout_do_not_land(var_tmp: Path, tmp_path: Path) -> None:
    repo, slot = Repo(var_tmp / "repos" / "src.git"), var_tmp / "slot"
    sha = repo.commit({"probe.py": WRITE_PROBE.encode()})
    assert check(repo, sha, "true", slot=slot, sandbox="bwrap").passed  # the slot exists from here on
    tag = uuid.uuid4().hex
    refused = [var_tmp / "repos" / f"beside-repo-{tag}", repo.path / f"in-repo-{tag}", slot / f"beside-{tag}",
               slot / "git" / "config", Path(f"/etc/mb-probe-{tag}"), Path(f"/usr/mb-probe-{tag}")]
    if not Path.home().is_relative_to("/tmp"):
        refused.append(Path.home() / f"mb-probe-{tag}")
    private = Path(f"/tmp/mb-probe-{tag}")  # inside, /tmp is the run's own: the write lands there, not here
    secret = tmp_path / f"secret-{tag}"
    secret.write_text("host /tmp is not visible")
    config_before = (slot / "git" / "config").read_bytes()
    command = (f"{PY} probe.py {' '.join(map(str, [*refused, private]))} inside-checkout && "
               f"test ! -e {secret} && echo private-tmp")
    result = check(repo, sha, command, slot=slot, sandbox="bwrap")
    assert result.outcome == "pass", result.log_head
    for target in refused:  # outside the view: it does not exist, or (on the way to the checkout) is read-only
        assert re.search(f"refused {re.escape(str(target))} (Read-only file system|No such file or directory)",
                         result.log_head), result.log_head
        assert target == slot / "git" / "config" or not target.exists(), target
    assert (slot / "git" / "config").read_bytes() == config_before
    assert f"wrote {private}" in result.log_head and not private.exists()
    assert "wrote inside-checkout" in result.log_head and "private-tmp" in result.log_head


@BWRAP
def test_hidden_directories_are_empty_and_read_only(var_tmp: Path, tmp_path: Path) -> None:
    """A private directory inside one the view binds (a toolchain directory that also holds the bot's data) is
    covered: empty and read-only. Without ``hide`` the same directory is visible, so the test can tell."""
    tools = var_tmp / "tools"
    data = tools / "data"
    repo = Repo(var_tmp / "src.git")
    (data / "pg").mkdir(parents=True)
    (data / "pg" / "secret.txt").write_text("bot data")
    (tools / "bin").mkdir()
    (tmp_path / "sock").mkdir()  # under /tmp: the private /tmp covers it already
    sha = repo.commit({"probe.py": WRITE_PROBE.encode()})
    command = f"ls -A {data}/pg; cat {data}/pg/secret.txt; ls {tools}; {PY} probe.py {data}/pg/x in-checkout"
    hidden = [data, tmp_path / "sock", var_tmp / "missing"]
    seen = run_check(repo.path, sha, CheckSpec(command, 60, sandbox_paths=tuple([str(tools)])), slot=var_tmp / "slot",
                     sandbox="bwrap", hide=hidden)
    assert seen.outcome == "pass", seen.log_head
    assert "bot data" not in seen.log_head and "bin" in seen.log_head, seen.log_head
    assert f"refused {data}/pg/x No such file or directory" in seen.log_head, seen.log_head
    assert "wrote in-checkout" in seen.log_head
    plain = run_check(repo.path, sha, CheckSpec(f"cat {data}/pg/secret.txt", 60, sandbox_paths=tuple([str(tools)])),
                      slot=var_tmp / "slot", sandbox="bwrap")
    assert plain.log_head == "bot data"


@BWRAP
def test_a_sandbox_that_cannot_be_set_up_is_an_error(repo: Repo, slot: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    sha = repo.commit({"a.txt": b"a"})
    monkeypatch.setattr(sb, "_OVERLAY_OPTIONS", [*sb._OVERLAY_OPTIONS, "no_such_option"])
    broken = check(repo, sha, "echo ran", slot=slot, sandbox="bwrap")
    assert broken.outcome == "error" and "the sandbox could not be set up" in broken.log_head
    assert "ran" not in broken.log_head
    monkeypatch.undo()
    assert check(repo, sha, "echo ran", slot=slot, sandbox="bwrap").log_head == "ran\n"


@BOTH
def test_environment_is_scrubbed(repo: Repo, slot: Path, sandbox: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MERGEBOT_DATABASE_URL", "postgresql://bot:secret@db/mergebot")
    monkeypatch.setenv("MERGEBOT_TOKEN", "tok-very-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-very-secret")
    sha = repo.commit({"a.txt": b"a"})
    result = check(repo, sha, "env", slot=slot, sandbox=sandbox)
    assert result.passed
    env = dict(line.split("=", 1) for line in result.log_head.splitlines() if "=" in line)
    assert not [k for k in env if k.startswith("MERGEBOT_") or "TOKEN" in k]
    assert "secret" not in result.log_head
    tmp = "/tmp" if sandbox == "bwrap" else str(slot / "run" / "tmp")
    assert env["TMPDIR"] == tmp and env["HOME"] == f"{tmp}/home" and env["CI"] == "true"


# -- limits --------------------------------------------------------------------------------------------------

FORK_PROBE = """
import os, sys, time
made = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError as e:
        print("fork refused after", made, e.strerror)
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    made += 1
print("made", made)
"""


@PIDS
@BOTH
def test_process_limit(repo: Repo, slot: Path, sandbox: str) -> None:
    token = uuid.uuid4().hex
    sha = repo.commit({"forks.py": FORK_PROBE.encode()})
    result = check(repo, sha, f"{PY} forks.py {token}", slot=slot, sandbox=sandbox, max_procs=20)
    assert result.passed, result.log_head
    made = int(result.log_head.split("made")[-1])
    assert "fork refused" in result.log_head and made == 18, result.log_head  # 20 = its shell + python + 18
    assert wait_gone(token) == []  # the sleeping children are gone with the check


@BOTH
def test_memory_limit(repo: Repo, slot: Path, sandbox: str) -> None:
    sha = repo.commit({"a.txt": b"a"})
    hog = f"{PY} -c \"b = bytearray(600 * 1024 * 1024); print('allocated')\""
    small = check(repo, sha, hog, slot=slot, sandbox=sandbox, memory_mb=300)
    assert small.outcome == "fail" and "MemoryError" in small.log_head, small.log_head
    enough = check(repo, sha, hog, slot=slot, sandbox=sandbox, memory_mb=2048)
    assert enough.passed and "allocated" in enough.log_head


@BOTH
def test_oversized_log_is_truncated_with_its_digest(repo: Repo, slot: Path, sandbox: str) -> None:
    sha = repo.commit({"a.txt": b"a"})
    size = 300_000_000
    t0 = time.monotonic()
    result = check(repo, sha, f"yes | head -c {size}", slot=slot, sandbox=sandbox)
    assert time.monotonic() - t0 < 10
    assert result.passed
    assert result.log_size == size
    assert result.log_digest == hashlib.sha256(b"y\n" * (size // 2)).hexdigest()
    assert result.log_head == "y\n" * (LOG_HEAD // 2) and result.log_tail == "y\n" * (LOG_TAIL // 2)
    on_disk = sum(p.stat().st_size for p in slot.rglob("*") if p.is_file())
    assert on_disk < 1_000_000  # streamed through a pipe, never stored


# -- checkout: tampering, reuse, cleaning ----------------------------------------------------------------------

TRACKED: Files = {"a.txt": b"original a\n", "d/b.txt": b"original b\n", "d/e/c.txt": b"c\n"}
SNEAKY = (f"{PY} -c \"import os; st = os.stat('a.txt'); open('a.txt', 'w').write('hacked a!\\n'); "
          "os.utime('a.txt', ns=(st.st_atime_ns, st.st_mtime_ns))\"")


@BOTH
@pytest.mark.parametrize("tamper, path", [
    ("echo hacked > a.txt", "a.txt"),
    (SNEAKY, "a.txt"),  # same size, same mtime
    ("rm d/b.txt", "d/b.txt"),
    ("chmod +x a.txt", "a.txt"),
    ("rm -rf d/e", "d/e"),
    ("mv a.txt z.txt", "a.txt"),
    ("rm a.txt && ln -s /etc/passwd a.txt", "a.txt"),
    ("rm -rf d && mkdir -p d/e && echo 'original b' > d/b.txt", "d/e/c.txt"),
])
def test_tampering_with_tracked_files_is_an_error(repo: Repo, slot: Path, sandbox: str, tamper: str,
                                                  path: str) -> None:
    sha = repo.commit(TRACKED)
    result = check(repo, sha, f"{tamper} && echo tampered", slot=slot, sandbox=sandbox)
    assert result.outcome == "error" and not result.passed
    first = result.log_head.splitlines()[0]
    assert first.startswith("the check modified tracked files:") and path in first, result.log_head
    assert "tampered" in result.log_head
    assert json.loads((slot / "state.json").read_text())["clean"] is False
    # The next run on the same slot sees the commit's tree again, exactly.
    again = check(repo, sha, "cat a.txt d/b.txt d/e/c.txt && test ! -x a.txt && test ! -e z.txt", slot=slot,
                  sandbox=sandbox)
    assert again.outcome == "pass", again.log_head
    assert again.log_head == "original a\noriginal b\nc\n"
    assert untracked_in(slot, TRACKED) == set()


@BOTH
def test_untracked_output_is_normal_and_cleaned(repo: Repo, slot: Path, sandbox: str) -> None:
    sha = repo.commit(TRACKED)
    make = ("mkdir -p build __pycache__ .pytest_cache d/e/__pycache__ && echo out > build/out.txt && "
            "echo c > __pycache__/m.pyc && echo v > .pytest_cache/v && echo p > d/e/__pycache__/c.pyc && "
            "touch a.txt && cat a.txt > /dev/null")
    result = check(repo, sha, make, slot=slot, sandbox=sandbox)
    assert result.outcome == "pass", result.log_head
    assert untracked_in(slot, TRACKED) == set()
    again = check(repo, sha, "test ! -e build && test ! -e __pycache__ && test ! -e .pytest_cache && "
                  "test ! -e d/e/__pycache__ && echo clean", slot=slot, sandbox=sandbox)
    assert again.outcome == "pass" and again.log_head == "clean\n"


@BOTH
def test_slot_moves_between_commits(repo: Repo, slot: Path, sandbox: str) -> None:
    v1: Files = {"a.txt": b"v1\n", "gone/x.txt": b"x\n", "keep/k.txt": b"k\n",
                 "tool.sh": (b"#!/bin/sh\necho tool\n", FileMode.BLOB_EXECUTABLE)}
    v2: Files = {"a.txt": b"v2\n", "keep/k.txt": b"k\n", "new.txt": b"new\n", "tool.sh": b"#!/bin/sh\necho tool\n"}
    c1, c2 = repo.commit(v1), repo.commit(v2)
    on_v1 = "grep -q v1 a.txt && test -f gone/x.txt && test ! -e new.txt && test -x tool.sh && ./tool.sh"
    on_v2 = "grep -q v2 a.txt && test ! -e gone && test -f new.txt && test ! -x tool.sh && test ! -e leftover"
    for sha, command, files in ((c1, on_v1 + " && echo junk > leftover", v1), (c2, on_v2, v2), (c1, on_v1, v1),
                                (c2, on_v2, v2)):
        result = check(repo, sha, command, slot=slot, sandbox=sandbox)
        assert result.outcome == "pass", (command, result.log_head)
        assert result.tree_sha == str(repo.repo[sha].peel(pygit2.Commit).tree_id)
        assert untracked_in(slot, files) == set()


def test_a_slot_not_known_clean_is_recreated(repo: Repo, slot: Path) -> None:
    """A crash mid-run leaves ``clean`` false: whatever tree/ holds then, the next run starts it again."""
    sha = repo.commit(TRACKED)
    assert check(repo, sha, "true", slot=slot, sandbox="none").passed
    target = slot / "tree" / "a.txt"
    st = target.stat()
    target.write_text("edited a!!\n")  # same size, mtime put back: only a full comparison tells
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    (slot / "tree" / "stray.py").write_text("import os\n")
    state = json.loads((slot / "state.json").read_text())
    (slot / "state.json").write_text(json.dumps({**state, "clean": False}))
    result = check(repo, sha, "cat a.txt && test ! -e stray.py", slot=slot, sandbox="none")
    assert result.outcome == "pass" and result.log_head == "original a\n", result.log_head


def test_a_slot_whose_tree_is_gone_is_recreated(repo: Repo, slot: Path) -> None:
    sha = repo.commit(TRACKED)
    assert check(repo, sha, "true", slot=slot, sandbox="none").passed
    state = json.loads((slot / "state.json").read_text())
    (slot / "state.json").write_text(json.dumps({**state, "tree": "1" * 40}))
    newer = repo.commit({**TRACKED, "a.txt": b"newer a\n"})
    result = check(repo, newer, "cat a.txt", slot=slot, sandbox="none")
    assert result.outcome == "pass" and result.log_head == "newer a\n", result.log_head


def test_slot_switches_repositories(tmp_path: Path, slot: Path) -> None:
    one, two = Repo(tmp_path / "one.git"), Repo(tmp_path / "two.git")
    a, b = one.commit({"a.txt": b"one\n"}), two.commit({"b.txt": b"two\n"})
    assert check(one, a, "cat a.txt", slot=slot, sandbox="none").log_head == "one\n"
    result = check(two, b, "cat b.txt && test ! -e a.txt", slot=slot, sandbox="none")
    assert result.passed and result.log_head == "two\n"
    assert not (slot / "git" / "objects" / "pack").exists() or not any((slot / "git" / "objects" / "pack").iterdir())


@BWRAP
def test_no_descriptor_is_closed_twice(repo: Repo, slot: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checks run in threads of the server: closing a descriptor twice could cut whatever socket reused its
    number in between (a client's connection, a database connection). Run alone, a second close of a number
    not reused fails with EBADF (the old code hid that error): no close during a check may fail."""
    good = repo.commit(PASSING_SUITE)
    failed: list[tuple[int, str]] = []
    calls: list[int] = []
    real_close = os.close

    def close(fd: int) -> None:
        calls.append(fd)
        try:
            real_close(fd)
        except OSError as e:
            failed.append((fd, str(e)))
            raise

    monkeypatch.setattr(sb.os, "close", close)
    for _ in range(3):
        result = check(repo, good, "true", slot=slot, sandbox="bwrap")
        assert result.outcome == "pass", log_of(result)
    monkeypatch.undo()
    assert calls, "no descriptor was closed through os.close: this test checks nothing"
    assert failed == []
