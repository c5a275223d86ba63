"""What a sandboxed check sees of the machine: an allow-list, built from nothing up, never ``/`` with holes.

The view (``build``), in the order bubblewrap mounts it:

- **the system, read-only**: ``/usr``, ``/bin``, ``/sbin`` and ``/lib*`` (a symlink stays a symlink, as on a
  merged-``/usr`` system);
- **a minimal ``/etc``**: ``ETC`` lists every entry (name service, TLS roots, the dynamic loader's files,
  locale and time zone, Debian's alternatives); nothing else of ``/etc``, so never ``shadow``, ``gshadow``,
  ``sudoers``, ssh's host keys or TLS private keys (``NEVER`` names them, and a test checks the two apart);
- **a minimal ``/dev``** (bubblewrap's: null, zero, full, random, urandom, tty, pts), read-only but for
  ``/dev/shm``, which is the run's own (on the run's filesystem, so it counts toward its disk limit);
- **a ``/proc``** of the check's own PID namespace (no other process, so no other environment);
- **a private ``/tmp``** (the run's directory, on the run's filesystem);
- **the toolchain, read-only**: exactly the directories of the interpreter's prefixes (``sys.prefix``,
  ``sys.base_prefix``, their exec twins) and of ``PATH``, never their parents; each at its own path, and, when
  it is reached through a symlink, at its real path too. A directory that would show everything (``/``, ``/root``,
  ``/home`` or a home directory itself) is left out, and the view says so;
- **the repository's own paths** (``repo add/set --sandbox-path``), read-only, each exactly (a path that does not
  exist is left out, and the view says so);
- a held-out run's checks at ``/held-out``, read-only (never inside the checkout);
- **the checkout**, writable through its overlay (``verifier.sandbox``);
- paths given as ``hide`` (the bot's data directory, the database's socket directory) that fall inside any of
  the above are covered with an empty read-only tmpfs, and every Unix socket listening under a bound directory
  with ``/dev/null``;
- finally the root itself is made read-only: what the check writes goes to its checkout, ``/tmp`` or
  ``/dev/shm``, all on the run's filesystem, and nowhere else.

Nothing else exists inside: no ``/root`` or ``/home`` beyond bound directories, no ``/var``, ``/srv``, ``/mnt``,
``/opt``, ``/run``, ``/sys``, no data directory, no other slot, no other repository's cache.

``View.explain()`` is the human account of it (``mergebot verify --explain-sandbox``); ``View.argv()`` is bwrap's
arguments. Building reads the filesystem (what exists, what is a symlink, which sockets listen) and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = (
    # name service
    "passwd", "group", "nsswitch.conf", "hosts", "host.conf", "hostname", "resolv.conf", "services", "protocols",
    "networks", "gai.conf", "netconfig",
    # TLS roots (never ssl/private)
    "ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf", "pki/tls/certs",
    "pki/ca-trust/extracted",
    # the dynamic loader
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    # locale and time
    "locale.alias", "locale.conf", "locale.gen", "default/locale", "localtime", "timezone",
    # what programs find themselves through
    "alternatives", "mime.types", "magic", "magic.mime", "os-release", "debian_version", "mtab",
)
NEVER = ("shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "ssh", "ssl/private", "security/opasswd",
         "pki/tls/private")
SANDBOX_TMP = "/tmp"  # noqa: S108 - inside the sandbox: the run's own directory
HELD_OUT = "/held-out"  # inside the sandbox: a held-out run's checks, read-only beside the checkout
TOO_WIDE = ("/", "/root", "/home")


@dataclass(frozen=True)
class Mount:
    op: str  # ro, rw, symlink, tmpfs, dev, proc, hide, mask
    dest: str
    src: str = ""
    why: str = ""


@dataclass
class View:
    mounts: list[Mount] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    checkout: str = ""

    def argv(self) -> list[str]:
        """bubblewrap's mount arguments for this view (the namespaces and the command are the sandbox's)."""
        args: list[str] = []
        hidden: list[str] = []
        made: set[str] = {"/"}
        fixed: list[str] = []  # mount points whose insides bwrap cannot make directories in (read-only, devices)
        for m in self.mounts:
            # The directories on the way to a mount are made here, 0755: bubblewrap would copy the host's modes
            # (``/root`` is 0700), which a check running as its own uid could not pass.
            for parent in _ancestors(m.dest):
                if parent not in made and not under(parent, fixed):
                    args += ["--perms", "0755", "--dir", parent]
                    made.add(parent)
            made.add(m.dest)
            if m.op != "rw":
                fixed.append(m.dest)
            if m.op == "ro":
                args += ["--ro-bind", m.src, m.dest]
            elif m.op == "rw":
                args += ["--bind", m.src, m.dest]
            elif m.op == "symlink":
                args += ["--symlink", m.src, m.dest]
            elif m.op == "dev":
                args += ["--dev", m.dest]
            elif m.op == "proc":
                args += ["--proc", m.dest]
            elif m.op == "hide":
                args += ["--tmpfs", m.dest]
                hidden.append(m.dest)
            elif m.op == "mask":
                args += ["--ro-bind", "/dev/null", m.dest]
        for h in hidden:
            args += ["--remount-ro", h]
        args += ["--remount-ro", "/dev", "--remount-ro", "/"]
        if self.checkout:
            args += ["--chdir", self.checkout]
        return args

    def readable(self) -> list[str]:
        """Every host path the check can read (the sources of the binds)."""
        return [m.src for m in self.mounts if m.op in ("ro", "rw")]

    def explain(self) -> str:
        width = max((len(m.dest) for m in self.mounts), default=10)
        lines = []
        for m in self.mounts:
            what = {"ro": "read-only", "rw": "writable", "symlink": f"-> {m.src}", "dev": "minimal devices",
                    "proc": "its own processes", "hide": "hidden (empty, read-only)",
                    "mask": "a socket, covered"}[m.op]
            src = f" (from {m.src})" if m.op in ("ro", "rw") and m.src != m.dest else ""
            lines.append(f"  {m.dest:<{width}}  {what}{src}  [{m.why}]")
        out = ["what a check sees (everything else does not exist):", *lines]
        if self.left_out:
            out.append("left out:")
            out += [f"  {p}: {why}" for p, why in self.left_out]
        return "\n".join(out)


def _ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``/a``, ``/a/b`` (not the path itself, not ``/``)."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def toolchain_dirs(environ: dict[str, str] | None = None) -> list[str]:
    """The interpreter's prefixes and the ``PATH`` entries, as given (absolute, existing directories)."""
    env = os.environ if environ is None else environ
    wanted = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              *env.get("PATH", "").split(os.pathsep)]
    return list(dict.fromkeys(os.path.abspath(p) for p in wanted if p and os.path.isabs(p) and os.path.isdir(p)))


def under(path: str, parents: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def too_wide(path: str, root: str = "/") -> bool:
    """A directory that would show a whole home, or everything (``root``: where the machine's ``/`` is)."""
    if root != "/" and under(path, [root]):
        path = "/" + os.path.relpath(path, root).lstrip(".")
    return path in TOO_WIDE or os.path.dirname(path) == "/home"


def build(*, checkout: Path | str, tmp: Path | str, shm: Path | str | None = None,
          toolchain: Sequence[str] | None = None, extra: Sequence[str] = (), hide: Sequence[Path | str] = (),
          etc: str = "/etc", root: str = "/", sockets: Sequence[str] | None = None,
          held_out: Path | str | None = None) -> View:
    """The view of one run. ``toolchain``: directories to bind (default ``toolchain_dirs()``); ``extra``: the
    repository's sandbox paths; ``hide``: private paths to cover wherever they fall inside; ``sockets``: the
    listening Unix sockets to cover (default: read from ``/proc/net/unix``). ``etc`` and ``root`` are where the
    host's ``/etc`` and system directories are read from (tests point them elsewhere)."""
    view = View(checkout=str(checkout))
    add = view.mounts.append
    for d in SYSTEM:
        host = os.path.join(root, d.lstrip("/"))
        if os.path.islink(host):
            add(Mount("symlink", d, os.readlink(host), "system"))
        elif os.path.isdir(host):
            add(Mount("ro", d, host, "system"))
    for name in ETC:
        host = os.path.join(etc, name)
        dest = f"/etc/{name}"
        if os.path.islink(host):
            add(Mount("symlink", dest, os.readlink(host), "etc"))
        elif os.path.exists(host):
            add(Mount("ro", dest, host, "etc"))
    add(Mount("dev", "/dev", why="devices"))
    if shm is not None:
        add(Mount("rw", "/dev/shm", str(shm), "the run's own"))  # noqa: S108 - inside the sandbox
    add(Mount("proc", "/proc", why="processes"))
    add(Mount("rw", SANDBOX_TMP, str(tmp), "the run's own"))
    bound = [m.dest for m in view.mounts if m.op in ("ro", "symlink")]
    for label, paths in (("toolchain", toolchain_dirs() if toolchain is None else toolchain),
                         ("sandbox path", extra)):
        for p in paths:
            path = os.path.abspath(p)
            real = os.path.realpath(path)
            if not os.path.exists(path):
                view.left_out.append((path, f"{label}: does not exist"))
                continue
            if too_wide(path, root) or too_wide(real, root):
                view.left_out.append((path, f"{label}: would show a whole home directory or more; bind what it "
                                            "holds instead"))
                continue
            for dest in dict.fromkeys((path, real)):
                if under(dest, bound) and not under(dest, [SANDBOX_TMP]):
                    continue  # already visible (the system's directories)
                if under(dest, [m.dest for m in view.mounts if m.why in ("toolchain", "sandbox path")]):
                    continue  # inside a directory bound already
                add(Mount("ro", dest, real, label))
    sources = [(m.src, m.dest) for m in view.mounts if m.op == "ro" and m.why in ("toolchain", "sandbox path")]
    sources += [(m.src, m.dest) for m in view.mounts if m.op == "ro" and m.why == "system"]
    for h in sorted({os.path.realpath(h) for h in hide if os.path.isdir(h)}):
        for src, dest in sources:
            if under(h, [src]):
                inside = dest.rstrip("/") + h[len(src.rstrip("/")):]
                if not under(inside, [m.dest for m in view.mounts if m.op == "hide"]):
                    add(Mount("hide", inside, why="private"))
    covered = [m.dest for m in view.mounts if m.op == "hide"]
    for sock in (listening_sockets() if sockets is None else sockets):
        for src, dest in sources:
            if under(sock, [src]):
                inside = dest.rstrip("/") + sock[len(src.rstrip("/")):]
                if not under(inside, covered):
                    add(Mount("mask", inside, why="a listening socket"))
    if held_out is not None:
        add(Mount("ro", HELD_OUT, str(held_out), "held-out checks"))
    add(Mount("rw", str(checkout), str(checkout), "the checkout (its overlay)"))
    return view


def listening_sockets() -> list[str]:
    """Real paths of the Unix sockets bound in this network namespace that exist now."""
    found = []
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="surrogateescape") as f:
            next(f, None)
            for line in f:
                parts = line.rstrip("\n").split(None, 7)
                if len(parts) == 8 and parts[7].startswith("/"):
                    found.append(parts[7])
    except OSError:
        return []
    out = set()
    for p in found:
        real = os.path.realpath(p)
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.lstat(real).st_mode):
                out.add(real)
    return sorted(out)
