"""Run one shell command under limits and capture a bounded, masked log: bubblewrap, or plainly when told.

Two ways to run, chosen by the caller (``verifier.runner`` records which one as the result's ``sandbox``):

``bwrap``
    The command runs in a bubblewrap sandbox that bwrap sets up as root, with every capability dropped and
    ``no_new_privs`` set, so the check is uid 0 without any privilege. It sees an allow-list view of the machine
    (``verifier.view``: the system and toolchain read-only, a minimal ``/etc`` and ``/dev``, its own ``/proc``
    and ``/tmp``, the repository's sandbox paths, its checkout) and nothing else. The checkout is writable
    through an overlay whose upper layer is a per-run directory: the check writes into the overlay, never into
    the slot's checkout itself, and the runner reads the upper layer afterwards to see exactly what the check
    changed (``verifier.checkout``). A cache generation (``verifier.cache``) is a second, read-only lower layer
    under the checkout's tree. The overlay is mounted in a private mount namespace (``unshare --mount``) just
    before bwrap starts, so it vanishes with the sandbox and never shows on the host. Also:

    - no network: a network namespace with only its own loopback, so neither the host's ``127.0.0.1`` nor DNS
      is reachable, nor abstract Unix sockets; a path-bound socket under a bound directory is covered;
    - its own PID, IPC and UTS namespaces, a new session (no terminal to inject into), ``--die-with-parent``.

    All of this needs root (which the verifier runs as); ``bwrap_problem()`` probes the full chain once per
    process and bubblewrap binary.

``none``
    A plain ``/bin/sh -c`` in the checkout, with the same limits, the same scrubbed environment and the same
    bounded log, but no isolation: the check can read what the verifier can, reach the network and write
    wherever the verifier can. Only an operator's explicit ``MERGEBOT_SANDBOX=none`` runs checks this way.

Limits, the same in both ways (``verifier.limits`` finds what the machine allows; each run records how each
limit was enforced, ``Enforced``):

- **time**: a wall-clock limit; at the deadline every process of the run is killed and the outcome is
  ``timeout``;
- **processes**: ``max_procs`` (the check's own shell included, plus bwrap's two processes when sandboxed) in a
  pids control group, which counts threads too and binds uid 0; where none can be made, the sandboxed check runs
  as an unprivileged uid of its own (``uid``) under ``RLIMIT_NPROC``;
- **memory**: ``RLIMIT_AS`` of ``memory_mb`` (address space) always, plus no core dumps; and, with a memory
  control group, resident memory: when the kernel kills a process of the run for it, the run ends at once as
  ``memory_limit``;
- **disk**: everything the check writes (overlay, ``/tmp``, ``/dev/shm``) is on the run's own filesystem
  (``verifier.disk``); when it is full the run ends at once as ``disk_limit``;
- **CPU**: a control group's least weight, else ``SCHED_IDLE``, else ``nice 19``: the server and PostgreSQL go
  first.

Limits are put on the child by the parent (``prlimit``, the groups' ``cgroup.procs``, its scheduling policy)
while the child waits on a gate (its stdin) before it execs anything, so no Python code runs between fork and
exec (``preexec_fn`` is not safe in a threaded process, and the runner is called from worker threads). Every
process of the run is killed when it ends (the process group, and every member of its control groups, even one
that left the group).

The log is stdout and stderr merged into one pipe and streamed into ``verifier.supervise.LogCapture``: every
secret the caller names is masked as it streams (``verifier.mask``), then the first ``LOG_HEAD`` and last
``LOG_TAIL`` bytes are kept, the full size is counted and the SHA-256 taken over every (masked) byte; nothing is
written to disk, so a check that prints gigabytes costs time, not space.

What the sandbox does not do:

- cover Unix sockets bound after the run started under a bound directory, or bound in another network
  namespace;
- stop the check from creating user namespaces of its own (still without any way back to the host's mounts,
  network or processes, but a larger kernel surface);
- limit processes where no pids control group can be made and the check is not sandboxed (``none``), or resident
  memory without a memory group (``RLIMIT_AS`` counts reservations, so a runtime that reserves a large heap up
  front needs a larger ``memory_mb``);
- let a check that runs as its own uid write into files of a cache generation (they stay root's): it reads them;
- any of the isolation in ``none`` mode, where only the limits, the environment and the log apply.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from verifier import limits as cg
from verifier import view as views
from verifier.disk import RunFs
from verifier.mask import Masker
from verifier.outcomes import FD_ENV, Collector
from verifier.supervise import Limits, Outcome, Stop, supervise

log = logging.getLogger(__name__)

SANDBOX_TASKS = 2  # bwrap outside the PID namespace and its PID-1 reaper inside
SANDBOX_TMP = views.SANDBOX_TMP
BWRAP = "bwrap"
SETPRIV = "/usr/bin/setpriv"  # util-linux's: switches a sandboxed check to its own uid (no pids control group)

# The child waits here until the parent has put its limits on it, then runs the rest with stdin closed.
GATE = 'read -r go && [ "$go" = go ] || exit 125; exec "$@" </dev/null'
# The same, in the private mount namespace, mounting the overlay on the checkout before it execs bwrap.
GATE_MOUNT = ('read -r go && [ "$go" = go ] || exit 125; exec </dev/null; '
              'mount -n -t overlay overlay -o "$1" "$2" || exit 126; shift 2; exec "$@"')




@dataclass(frozen=True)
class Overlay:
    """The upper layer and overlay work directory of one run (both empty, on the run's filesystem)."""

    upper: Path
    work: Path
    lower: Path | None = None  # a read-only layer under the checkout's tree (a cache generation, verifier.cache)








def process_limit_available() -> bool:
    """Whether checks get a process limit here (a writable pids control group)."""
    return cg.machine().has("pids")


# -- bubblewrap ----------------------------------------------------------------------------------------------

_bwrap_lock = threading.Lock()
_bwrap_problems: dict[str, str | None] = {}
# Overlay options: no redirects, metacopy or index, so that the upper layer says plainly what changed;
# "volatile" (Linux 5.10+) skips syncing the upper layer, which is thrown away anyway. Dropped if refused.
_OVERLAY_OPTIONS = ["redirect_dir=off", "metacopy=off", "index=off", "xino=off", "volatile"]
INSTALL = "install bubblewrap (Debian and Ubuntu: apt-get install -y bubblewrap; Fedora: dnf install bubblewrap)"


def bwrap_problem(bwrap: str = BWRAP) -> str | None:
    """Why the bwrap sandbox cannot be used here with that binary, or None when it can (probed once per process)."""
    with _bwrap_lock:
        if bwrap not in _bwrap_problems:
            problem = _probe_bwrap(bwrap)
            if problem is not None and "volatile" in _OVERLAY_OPTIONS:
                _OVERLAY_OPTIONS.remove("volatile")  # an older kernel: try once more without it
                problem = _probe_bwrap(bwrap)
            _bwrap_problems[bwrap] = problem
            if problem is not None:
                log.warning("the bwrap sandbox is not usable here: %s", problem)
        return _bwrap_problems[bwrap]


def bwrap_usable(bwrap: str = BWRAP) -> bool:
    return bwrap_problem(bwrap) is None


def _probe_bwrap(bwrap: str) -> str | None:
    missing = [tool for tool in (bwrap, "unshare", "mount") if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} ({INSTALL})"
    if os.geteuid() != 0:
        return "the bwrap sandbox needs root (it mounts the checkout's overlay and sets up bwrap as root)"
    work = Path(tempfile.mkdtemp(prefix="mb-bwrap-probe-"))
    try:
        checkout, tmp = work / "checkout", work / "tmp"
        for d in (checkout, tmp, work / "upper", work / "work"):
            d.mkdir()
        (checkout / "probe").write_text("probe\n")
        out = run_command("cat probe && echo ok > probe.out && cat probe.out", checkout=checkout, tmp=tmp,
                          env={"PATH": "/usr/bin:/bin"}, limits=Limits(timeout=30),
                          overlay=Overlay(work / "upper", work / "work"), bwrap=bwrap, toolchain=())
        text = bytes(out.log.head).decode("utf-8", "replace")
        if not out.started or out.exit_code != 0 or text != "probe\nok\n":
            return f"the probe sandbox failed: {out.setup_error or text.strip() or out.exit_code}"
        if (checkout / "probe.out").exists() or not (work / "upper" / "probe.out").exists():
            return "the probe's overlay did not keep the checkout read-only"
        return None
    except OSError as e:
        return f"the probe sandbox failed: {e}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _overlay_option(path: Path) -> str:
    return str(path).replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def bwrap_argv(command: str, *, view: views.View, overlay: Overlay, status_fd: int, network: bool = False,
               bwrap: str = BWRAP, uid: int | None = None) -> list[str]:
    """The argv that waits on the gate, mounts the overlay in a private mount namespace and runs ``command``
    under bwrap, in ``view``; with ``uid``, as that unprivileged uid (``setpriv`` switches to it inside, with the
    only capabilities bwrap kept for that, and then drops every capability, the bounding set included)."""
    co = view.checkout
    caps = ["--cap-drop", "ALL"]
    run = ["/bin/sh", "-c", command]
    if uid is not None:
        caps += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        run = [SETPRIV, "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--inh-caps=-all",
               "--bounding-set=-all", "--", *run]
    args = [bwrap, *view.argv(),
            *([] if network else ["--unshare-net"]), "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "verifier", "--die-with-parent", "--new-session",
            *caps, "--json-status-fd", str(status_fd), "--", *run]
    lowers = _overlay_option(Path(co)) + (f":{_overlay_option(overlay.lower)}" if overlay.lower else "")
    options = ",".join([f"lowerdir={lowers}", f"upperdir={_overlay_option(overlay.upper)}",
                        f"workdir={_overlay_option(overlay.work)}", *_OVERLAY_OPTIONS])
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", GATE_MOUNT, "verifier-sandbox",
            options, co, *args]


# -- running -------------------------------------------------------------------------------------------------

def run_command(command: str, *, checkout: Path, tmp: Path, env: dict[str, str], limits: Limits,
                overlay: Overlay | None, hide: Sequence[Path | str] = (), stop: Stop | None = None,
                network: bool = False, extra: Sequence[str] = (), shm: Path | None = None, runfs: RunFs | None = None,
                mask: Masker | None = None, toolchain: Sequence[str] | None = None, bwrap: str = BWRAP,
                uid: int | None = None, collect: Collector | None = None, held_out: Path | None = None) -> Outcome:
    """Run ``command`` in ``checkout``: under bwrap when ``overlay`` is given, else plainly. ``stop``, once set,
    kills it (the outcome says ``stopped``). ``network``: keep the host's network (only a repository's setup
    step, on a commit already on main, is ever given it). ``extra``: the repository's sandbox paths; ``hide``:
    private paths, covered wherever they fall inside the view; ``toolchain``: the directories to bind (default
    ``verifier.view.toolchain_dirs()``). ``shm``: the run's ``/dev/shm``; ``runfs``: the run's filesystem,
    watched for its limit; ``mask``: the secrets to mask in the log; ``uid``: the unprivileged uid the sandboxed
    check runs as (``verifier.limits.run_uid``, where no pids group can be made): its processes are limited by
    ``RLIMIT_NPROC`` and killed by uid at the end. ``collect``: what our pytest plugin streams on its own pipe
    (``verifier.outcomes``) is fed to it while the check runs."""
    status_r, status_w = os.pipe() if overlay is not None else (-1, -1)
    report_r, report_w = os.pipe() if collect is not None else (-1, -1)
    if collect is not None:  # how its pytest starts is in ``env`` already (``verifier.outcomes.start_env``)
        env = {**env, FD_ENV: str(report_w)}
    try:
        if overlay is not None:
            view = views.build(checkout=checkout, tmp=tmp, shm=shm, toolchain=toolchain, extra=extra, hide=hide,
                               held_out=held_out)
            argv = bwrap_argv(command, view=view, overlay=overlay, status_fd=status_w, network=network, bwrap=bwrap,
                              uid=uid)
            cwd = str(tmp)
        else:
            argv = ["/bin/sh", "-c", GATE, "verifier-gate", "/bin/sh", "-c", command]
            cwd = str(checkout)
    except BaseException:
        for fd in (status_r, status_w, report_r, report_w):
            if fd >= 0:
                os.close(fd)
        raise
    try:
        return supervise(argv, cwd=cwd, env=env, limits=limits,
                         status=(status_r, status_w) if overlay is not None else None,
                         tasks=limits.max_procs + (SANDBOX_TASKS if overlay is not None else 0), stop=stop,
                         runfs=runfs, mask=mask, uid=uid if overlay is not None else None,
                         report=(report_r, report_w, collect) if collect is not None else None)
    finally:
        if report_r >= 0:
            os.close(report_r)
        # Only the read end: supervise owns the write end and closes it exactly once. Closing a descriptor
        # twice is not harmless here: checks run in threads of the server, and in between the number can be
        # reused by one of its sockets (a client connection, a database connection), which the second close
        # would cut.
        if status_r >= 0:
            os.close(status_r)


























