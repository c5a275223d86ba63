"""The sandbox a check runs in, read from inside real checks: what it sees, what it may write, what it may use.

  * The view is an allow-list (``verifier.view``): the check reads its toolchain and imports the bot's Python
    environment's packages; of ``/root`` and ``/home`` it sees the bound toolchain directories and the way to
    them, nothing else (a credentials file planted there stays unseen); ``/etc`` holds only the listed entries
    (no ``shadow``); ``/var``, ``/srv``, ``/mnt``, ``/opt``, ``/run``, ``/sys`` and the data directory are not
    there; every ``--sandbox-path`` is visible and read-only; the root itself is read-only.
  * Disk: what a run writes (checkout, ``/tmp``, ``/dev/shm``) is one limited filesystem; filling it ends the run
    as ``disk_limit`` with the peak recorded, and nothing is left mounted. Without the sandbox the limit is polled,
    and the run says so.
  * Memory: a run whose processes together go past the resident limit is ended as ``memory_limit``.
  * CPU: the check's processes run at the least weight (a control group's, or ``SCHED_IDLE``).
  * Secrets the caller names are masked in the log (``***``), wherever they fall, the digest included.
  * Fail closed: without a usable bubblewrap the check is refused with how to install it; ``none`` still runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.test_verifier import BWRAP, Repo
from verifier import disk, limits
from verifier import view as views
from verifier.mask import MASK, Masker
from verifier.runner import LOG_HEAD, CheckSpec, run_check

PY = sys.executable
ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the sandbox does)")
MEMORY = pytest.mark.skipif(not limits.machine().has("memory"), reason="no writable memory control group")


@pytest.fixture
def repo(var_tmp: Path) -> Repo:
    return Repo(var_tmp / "src.git")


def run(repo: Repo, files: dict[str, bytes], command: str, slot: Path, **kw: object) -> tuple[str, object]:
    sha = repo.commit(files)
    spec = {k: v for k, v in kw.items() if k in CheckSpec.__dataclass_fields__}
    result = run_check(repo.path, sha, CheckSpec(command, 60, **spec), slot=slot, sandbox="bwrap",  # type: ignore[arg-type]
                       **{k: v for k, v in kw.items() if k not in spec})
    return result.log_head + result.log_tail, result


# -- the view ------------------------------------------------------------------------------------------------

@BWRAP
def test_a_check_reads_its_toolchain_and_imports_the_bots_packages(repo: Repo, var_tmp: Path) -> None:
    probe = (b"import sys, pytest, pygit2, psycopg, fastapi\n"
             b"print('imported', sys.prefix)\n")
    log, result = run(repo, {"probe.py": probe}, "python probe.py && git --version && sh -c 'echo shell'",
                      var_tmp / "slot")
    assert result.outcome == "pass", log  # type: ignore[attr-defined]
    assert f"imported {sys.prefix}" in log and "git version" in log and "shell" in log


@BWRAP
def test_nothing_of_root_or_home_beyond_the_toolchain(repo: Repo, var_tmp: Path) -> None:
    tag = uuid.uuid4().hex
    planted = [Path.home() / f".mb-credentials-{tag}", Path("/root") / f".git-credentials-{tag}"]
    home = Path("/home") / f"mb-{tag}"
    planted.append(home / ".config" / "gh" / "hosts.yml")
    for p in planted:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"token-{tag}\n")
    try:
        log, result = run(repo, {"a.txt": b"a"},
                          "find /root /home -maxdepth 4 -print 2>&1; cat /root/.git-credentials-* 2>&1; true",
                          var_tmp / "slot")
    finally:
        for p in planted:
            p.unlink(missing_ok=True)
        shutil.rmtree(home, ignore_errors=True)
    assert result.outcome == "pass", log  # type: ignore[attr-defined]
    assert f"token-{tag}" not in log and tag not in log, log
    bound = views.toolchain_dirs()
    seen = [line for line in log.splitlines() if line.startswith(("/root", "/home"))]
    assert seen, log  # find listed something (at least the way to the toolchain), so the check below judges
    for path in seen:
        assert any(path == b or path.startswith(b + "/") or b.startswith(path + "/") for b in bound), (path, bound)


@BWRAP
def test_etc_is_minimal_and_never_holds_shadow(repo: Repo, var_tmp: Path) -> None:
    log, result = run(repo, {"a.txt": b"a"},
                      "ls -A /etc; echo ---; cat /etc/shadow 2>&1; cat /etc/gshadow 2>&1; ls /etc/ssh 2>&1; "
                      "head -1 /etc/passwd", var_tmp / "slot")
    assert result.outcome == "pass", log  # type: ignore[attr-defined]
    listed, rest = log.split("---\n", 1)
    allowed = {name.split("/")[0] for name in views.ETC}
    assert set(listed.split()) <= allowed, set(listed.split()) - allowed
    assert "/etc/shadow: No such file or directory" in rest and "/etc/gshadow: No such file" in rest
    assert "/etc/ssh" in rest and "No such file" in rest.split("/etc/ssh")[1].splitlines()[0]
    assert rest.strip().splitlines()[-1].startswith("root:x:0:0:"), rest  # the name service still works
    assert not {n.split("/")[0] for n in views.NEVER} & set(views.ETC), "an entry is allowed and forbidden"


@BWRAP
def test_no_var_srv_mnt_opt_run_sys_or_data_dir(repo: Repo, var_tmp: Path) -> None:
    data = var_tmp / "data"
    (data / "pg").mkdir(parents=True)
    (data / "pg" / "marker").write_text("data-dir-marker")
    command = ("for d in /var/lib /var/log /srv /mnt /opt /run /sys /media /boot; do ls -A $d 2>&1 | head -3; done; "
               f"echo data:; ls -A {data} 2>&1; echo :data; cat {data}/pg/marker 2>&1; touch /new-file 2>&1; true")
    log, result = run(repo, {"a.txt": b"a"}, command, data / "slots" / "0", hide=[data])
    assert result.outcome == "pass", log  # type: ignore[attr-defined]
    for d in ("/var/lib", "/var/log", "/srv", "/mnt", "/opt", "/run", "/sys", "/media", "/boot"):
        assert f"ls: cannot access '{d}': No such file or directory" in log, (d, log)
    # of the data directory, only the way to the check's own checkout (its slot) exists
    assert "data-dir-marker" not in log and log.split("data:\n", 1)[1].split(":data", 1)[0].split() == ["slots"], log
    assert "touch: cannot touch '/new-file': Read-only file system" in log


@BWRAP
def test_sandbox_paths_are_visible_and_read_only(repo: Repo, var_tmp: Path) -> None:
    tool = var_tmp / "opt-tool"
    (tool / "bin").mkdir(parents=True)
    (tool / "bin" / "hello").write_text("#!/bin/sh\necho hello from the tool\n")
    (tool / "bin" / "hello").chmod(0o755)
    single = var_tmp / "version-file"
    single.write_text("3.11.7\n")
    beside = var_tmp / "not-added"
    beside.write_text("unseen\n")
    command = (f"{tool}/bin/hello; cat {single}; cat {beside} 2>&1; touch {tool}/x 2>&1; echo y >> {single} 2>&1; "
               "true")
    log, result = run(repo, {"a.txt": b"a"}, command, var_tmp / "slot", sandbox_paths=[str(tool), str(single)])
    assert result.outcome == "pass", log  # type: ignore[attr-defined]
    assert "hello from the tool" in log and "3.11.7" in log and "unseen" not in log
    assert f"touch: cannot touch '{tool}/x': Read-only file system" in log
    assert "Read-only file system" in log.split(str(single))[-1] and single.read_text() == "3.11.7\n"


def test_the_view_binds_exactly_the_toolchain_never_its_parents(tmp_path: Path) -> None:
    """Pure: what ``build`` mounts, from a fake machine (a toolchain under a home, a symlinked one, too-wide
    entries, a private directory inside a bound one, a socket)."""
    root = tmp_path / "root"
    for d in ("usr/bin", "opt/py/bin", "home/ann/.pyenv/versions/3.11/bin", "home/ann/secrets", "data/pg"):
        (root / d).mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")
    (root / "link-py").symlink_to(root / "opt" / "py")
    etc = tmp_path / "etc"
    etc.mkdir()
    for name in ("passwd", "shadow", "hosts"):
        (etc / name).write_text(name)
    (etc / "localtime").symlink_to("/usr/share/zoneinfo/UTC")
    pyenv = root / "home/ann/.pyenv/versions/3.11/bin"
    view = views.build(checkout="/slots/0/tree", tmp="/slots/0/run/tmp", shm="/slots/0/run/shm",
                       toolchain=[str(pyenv), str(root / "link-py" / "bin"), "/", str(root / "home" / "ann"),
                                  str(root / "missing")],
                       extra=[str(root / "data")], hide=[str(root / "data" / "pg")], etc=str(etc), root=str(root),
                       sockets=[str(root / "opt/py/bin/db.sock")])
    ro = {m.dest: m.src for m in view.mounts if m.op == "ro"}
    assert ro[str(pyenv)] == str(pyenv)
    assert ro[str(root / "link-py" / "bin")] == str(root / "opt/py/bin")  # at the path it is reached by ...
    assert ro[str(root / "opt/py/bin")] == str(root / "opt/py/bin")  # ... and at its real path
    assert not [d for d in ro if d in ("/", str(root / "home"), str(root / "home/ann"))]
    assert {p for p, _ in view.left_out} == {"/", str(root / "home/ann"), str(root / "missing")}
    assert "/etc/shadow" not in ro and ro["/etc/passwd"] == str(etc / "passwd")
    links = {m.dest: m.src for m in view.mounts if m.op == "symlink"}
    assert links["/etc/localtime"] == "/usr/share/zoneinfo/UTC" and links["/bin"] == "usr/bin"
    assert [m.dest for m in view.mounts if m.op == "hide"] == [str(root / "data" / "pg")]
    masked = {m.dest for m in view.mounts if m.op == "mask"}  # covered at every path it is reached by
    assert masked == {str(root / "opt/py/bin/db.sock"), str(root / "link-py/bin/db.sock")}
    order = [m.dest for m in view.mounts]
    assert order[-1] == "/slots/0/tree" and order.index("/tmp") < order.index(str(pyenv))
    args = view.argv()
    assert args[-4:] == ["--remount-ro", "/", "--chdir", "/slots/0/tree"] and "--remount-ro" in args
    assert "what a check sees" in view.explain() and "left out" in view.explain()


# -- disk, memory, CPU -----------------------------------------------------------------------------------------

@BWRAP
def test_filling_the_disk_ends_the_run_and_leaves_nothing_mounted(repo: Repo, var_tmp: Path) -> None:
    slot = var_tmp / "slot"
    command = ("dd if=/dev/zero of=/tmp/a bs=1M count=12 2>/dev/null; dd if=/dev/zero of=/dev/shm/b bs=1M count=12 "
               "2>/dev/null; dd if=/dev/zero of=c bs=1M count=200 2>&1 | tail -1; sleep 30")
    started = time.monotonic()
    log, result = run(repo, {"a.txt": b"a"}, command, slot, disk_limit_mb=32)
    r = result  # type: ignore[assignment]
    assert r.outcome == "disk_limit", log  # type: ignore[attr-defined]
    assert time.monotonic() - started < 15  # ended at once, not by the 60 s timeout nor the sleep
    assert log.startswith("the check reached its disk limit"), log
    limits_ = r.limits  # type: ignore[attr-defined]
    assert "disk=tmpfs" in limits_["enforced"] and limits_["disk_limit_mb"] == 32
    assert 24 << 20 < limits_["disk_peak_bytes"] <= 32 << 20, limits_  # the three places counted together
    assert disk.mounts_under(slot) == [] and not (slot / "run").exists()
    again = run_check(repo.path, str(repo.head), CheckSpec("df -k /tmp | tail -1", 60, disk_limit_mb=32), slot=slot,
                      sandbox="bwrap")
    assert again.passed and again.limits and again.limits["disk_peak_bytes"] < 1 << 20, again.log_head


def test_without_the_sandbox_the_disk_limit_is_polled_and_says_so(repo: Repo, var_tmp: Path) -> None:
    command = "for i in $(seq 1 40); do dd if=/dev/zero of=f$i bs=1M count=2 2>/dev/null; sleep 0.1; done; sleep 30"
    sha = repo.commit({"a.txt": b"a"})
    result = run_check(repo.path, sha, CheckSpec(command, 60, disk_limit_mb=16), slot=var_tmp / "slot", sandbox="none")
    assert result.outcome == "disk_limit", result.log_head
    assert result.limits and "disk=poll" in result.limits["enforced"]
    assert "measured every 1 s" in result.limits["disk_note"]
    assert result.limits["disk_peak_bytes"] > 16 << 20  # polling lets it past the limit: that is what it says


@BWRAP
@MEMORY
def test_resident_memory_past_the_limit_ends_the_run(repo: Repo, var_tmp: Path) -> None:
    hog = (b"import os, time\n"
           b"for _ in range(4):\n"
           b"    if os.fork() == 0:\n"
           b"        b = bytearray(150 << 20)\n"
           b"        for i in range(0, len(b), 4096): b[i] = 1\n"
           b"        time.sleep(30)\n"
           b"        os._exit(0)\n"
           b"time.sleep(30)\n")
    log, result = run(repo, {"hog.py": hog}, "python hog.py", var_tmp / "slot", memory_mb=256, disk_limit_mb=16)
    r = result
    assert r.outcome == "memory_limit", log  # type: ignore[attr-defined]
    assert r.duration_ms < 20_000 and "memory=cgroup" in r.limits["enforced"]  # type: ignore[attr-defined]
    assert log.startswith("the check reached its memory limit")
    # Each process alone fits in the address-space limit: only the resident limit saw them together.
    ok, fine = run(repo, {"hog.py": hog.replace(b"range(4)", b"range(1)").replace(b"time.sleep(30)", b"pass")},
                   "python hog.py", var_tmp / "slot", memory_mb=256, disk_limit_mb=16)
    assert fine.outcome == "pass", ok  # type: ignore[attr-defined]


@BWRAP
def test_a_check_runs_at_the_least_cpu_weight(repo: Repo, var_tmp: Path) -> None:
    token = uuid.uuid4().hex
    machine = limits.machine()
    found: dict[str, str] = {}

    def look() -> None:  # while the check runs: its process's scheduling policy and its CPU group's weight
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not found:
            for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                try:
                    if token.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
                        continue
                    found["policy"] = str(os.sched_getscheduler(int(pid)))
                    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                        _, controllers, group = line.split(":", 2)
                        if machine.has("cpu") and ("cpu" in controllers.split(",") or machine.version == "v2"):
                            name = group.rsplit("/", 1)[-1]
                            knob = "cpu.weight" if machine.version == "v2" else "cpu.shares"
                            found["group"] = name
                            found["weight"] = (machine.bases["cpu"] / name / knob).read_text().strip()
                except OSError:
                    continue
                break
            time.sleep(0.05)

    watcher = threading.Thread(target=look)
    watcher.start()
    _, result = run(repo, {"a.txt": b"a"}, f"sleep 3 # {token}", var_tmp / "slot")
    watcher.join()
    enforced = result.limits["enforced"]  # type: ignore[attr-defined]
    assert found, "the check's process was not seen"
    if machine.has("cpu"):
        assert enforced.startswith("cpu=cgroup") and found["group"].startswith(limits.PREFIX), (enforced, found)
        assert int(found["weight"]) == (limits.CPU_WEIGHT_V2 if machine.version == "v2" else limits.CPU_SHARES_V1)
    else:
        assert enforced.startswith("cpu=sched_idle") and found["policy"] == str(os.SCHED_IDLE), found


# -- secrets ---------------------------------------------------------------------------------------------------

SECRET = "ghp_" + "Z9" * 10  # what a forge token looks like


@BWRAP
def test_a_secret_the_check_prints_is_masked_everywhere_in_the_log(repo: Repo, var_tmp: Path) -> None:
    # Printed at the start, across the head's cut, many times in the middle, across pipe reads, and at the end.
    script = (f"import sys, time\nS = {SECRET!r}\n"
              "out = sys.stdout\n"
              "out.write('start ' + S + '\\n')\n"
              f"out.write('x' * ({LOG_HEAD} - 12 - len('start ') - 1) + S + '\\n')\n"
              "for i in range(2000):\n"
              "    out.write(f'line {i} {S}\\n')\n"
              "out.flush()\n"
              "out.write(S[:9]); out.flush(); time.sleep(0.2); out.write(S[9:] + '\\n')\n"
              "out.write('end ' + S)\n")
    log, result = run(repo, {"p.py": script.encode()}, "python p.py", var_tmp / "slot", secrets=[SECRET, "short"])
    r = result
    assert r.outcome == "pass", log  # type: ignore[attr-defined]
    assert SECRET not in log and SECRET[:12] not in log and SECRET[-12:] not in log
    assert log.count(MASK) >= 3 and r.log_tail.endswith(f"end {MASK}")  # type: ignore[attr-defined]
    # the digest and size are of the masked output: what a reviewer's re-run with the same secrets gives
    import subprocess

    raw = subprocess.run([PY, "-c", script], capture_output=True, check=True).stdout
    masked = Masker([SECRET]).bytes(raw)
    assert r.log_size == len(masked) and r.log_digest == hashlib.sha256(masked).hexdigest()  # type: ignore


def test_masking_a_stream_in_any_pieces_equals_masking_it_whole() -> None:
    masker = Masker(["secret-value-1", "secret-value-12345", "tok"])
    assert masker.values == ["secret-value-12345", "secret-value-1"]  # shorter than 8: no secret, and longest first

    @given(st.lists(st.sampled_from([b"secret-value-1", b"secret-value-12345", b"x", b"secret-", b"\n", b"value-1"]),
                    max_size=30), st.lists(st.integers(min_value=1, max_value=20), max_size=30))
    def prop(parts: list[bytes], cuts: list[int]) -> None:
        data = b"".join(parts)
        stream, out, i = masker.stream(), b"", 0
        for n in cuts:
            out += stream.feed(data[i:i + n])
            i += n
        out += stream.feed(data[i:]) + stream.end()
        assert out == masker.bytes(data)
        assert b"secret-value-1" not in out

    prop()


def test_cut_edges_lose_their_pieces_of_a_secret() -> None:
    masker = Masker([SECRET])
    assert masker.cut("head ... " + SECRET[:7], head=True) == "head ... ***"
    assert masker.cut(SECRET[-5:] + " tail", tail=True) == "*** tail"
    assert masker.cut("ordinary ghp", head=True) == "ordinary ghp"  # under MIN_PIECE characters: left alone
    assert masker.json({"log": [SECRET], SECRET: 1}) == {"log": ["***"], "***": 1}


# -- failing closed --------------------------------------------------------------------------------------------

def test_without_bubblewrap_a_check_is_refused_and_says_how_to_install_it(repo: Repo, var_tmp: Path) -> None:
    sha = repo.commit({"a.txt": b"a"})
    marker = var_tmp / "ran"
    refused = run_check(repo.path, sha, CheckSpec(f"touch {marker}", 60), slot=var_tmp / "slot",
                        bwrap="/nonexistent/bwrap")
    assert refused.outcome == "error" and not marker.exists()
    assert "apt-get install -y bubblewrap" in refused.log_head and "MERGEBOT_SANDBOX=none" in refused.log_head
    plain = run_check(repo.path, sha, CheckSpec(f"touch {marker}", 60), slot=var_tmp / "slot", sandbox="none",
                      bwrap="/nonexistent/bwrap")
    assert plain.passed and plain.sandbox == "none" and marker.exists()


@BWRAP
@pytest.mark.parametrize("where", ["var", "tmp"])
def test_without_a_pids_group_the_check_runs_as_its_own_uid_and_nproc_holds(
        repo: Repo, var_tmp: Path, tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with no writable control group (a container's read-only /sys/fs/cgroup), simulated: the check
    runs as an unprivileged uid of its own, RLIMIT_NPROC bounds its forks, it can still write its checkout and
    /tmp, and every process of it (a daemon included) is killed by uid at the end."""
    monkeypatch.setattr(limits, "_machine", limits.Machine("none", problems=("no control group, for this test",)))
    token = uuid.uuid4().hex
    forks = (b"import os, sys, time\n"
             b"if os.fork() == 0:\n"
             b"    os.setsid()\n"
             b"    os.execve('/bin/sleep', ['sleep', '300'], {'HOG': sys.argv[1]})\n"
             b"made = 0\n"
             b"for _ in range(200):\n"
             b"    try:\n"
             b"        pid = os.fork()\n"
             b"    except OSError as e:\n"
             b"        print('fork refused after', made, e.strerror)\n"
             b"        break\n"
             b"    if pid == 0:\n"
             b"        time.sleep(60)\n"
             b"        os._exit(0)\n"
             b"    made += 1\n"
             b"print('uid', os.getuid(), 'made', made)\n")
    slot = (var_tmp if where == "var" else tmp_path) / "slot"  # the checkout outside /tmp, or under it
    log, result = run(repo, {"forks.py": forks},
                      f"python forks.py {token} && echo w > written.txt && echo t > /tmp/t && id -u", slot,
                      max_procs=20)
    r = result
    assert r.outcome == "pass", log  # type: ignore[attr-defined]
    uid = limits.run_uid(str(slot.absolute()))
    assert f"uid {uid} made" in log and "fork refused after" in log, log
    made = int(log.split("made")[-1].split()[0])
    assert 14 <= made <= 18, log  # 20 processes of its uid: its shell, python, the daemon and the forks
    assert "pids=uid" in r.limits["enforced"], r.limits  # type: ignore[attr-defined]
    assert limits.uid_processes(uid) == []  # the daemon and the sleeping children went with the run


@ROOT
def test_what_the_machine_allows_is_read_from_its_mounts(tmp_path: Path) -> None:
    """``limits.probe`` on made-up machines (its mount table and groups are files here): cgroup v1 hierarchies,
    one of them read-only; a v2 hierarchy whose controllers must be enabled for children; none at all."""
    def machine(mounts: list[str], groups: str) -> limits.Machine:
        (tmp_path / "mountinfo").write_text("".join(f"{i} 1 0:{i} {m}\n" for i, m in enumerate(mounts)))
        (tmp_path / "cgroup").write_text(groups)
        return limits.probe(mountinfo=str(tmp_path / "mountinfo"), cgroup=str(tmp_path / "cgroup"))

    v1 = tmp_path / "v1"
    for c in ("cpu", "memory", "pids"):
        (v1 / c / "serve").mkdir(parents=True)
    m = machine([f"/ {v1}/cpu rw,relatime - cgroup cgroup rw,cpu",
                 f"/ {v1}/memory ro,relatime - cgroup cgroup rw,memory",
                 f"/ {v1}/pids rw,relatime - cgroup cgroup rw,pids"], "3:cpu:/serve\n2:memory:/serve\n1:pids:/serve\n")
    assert m.version == "v1" and m.bases == {"cpu": v1 / "cpu" / "serve", "pids": v1 / "pids" / "serve"}
    assert any("memory" in p and "not writable" in p for p in m.problems), m.problems
    assert str(limits.enforced(m, disk="tmpfs")) == "cpu=cgroup memory=rlimit disk=tmpfs pids=cgroup"

    v2 = tmp_path / "v2" / "serve"
    v2.mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (v2 / "cgroup.subtree_control").write_text("")
    m = machine([f"/ {tmp_path / 'v2'} rw,nosuid - cgroup2 cgroup2 rw"], "0::/serve\n")
    assert m.version == "v2" and set(m.bases) == {"cpu", "memory", "pids"} and m.bases["cpu"] == v2
    assert (v2 / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"  # handed to the runs' groups

    m = machine([f"/ {tmp_path / 'v2'} ro,nosuid - cgroup2 cgroup2 rw"], "0::/serve\n")
    assert m.version == "none" and "read-only" in m.problems[-1]
    assert str(limits.enforced(m, disk="poll")) == "cpu=sched_idle memory=rlimit disk=poll pids=uid"
    assert machine([], "0::/\n").version == "none"
