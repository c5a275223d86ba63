"""What a check's interpreter and pytest read at start-up from a checkout, and which module names it must not shadow.

Rules:
  * **Start-up files** (``is_startup``): files Python or pytest reads before the first test, or instead of the
    source it was given: pytest's configuration (``pytest.ini``, ``.pytest.ini``, ``pytest.toml``, ``.pytest.toml``,
    ``tox.ini``; the sections of ``setup.cfg`` and ``pyproject.toml`` are compared apart), ``conftest.py``, the
    interpreter's own hooks (``sitecustomize.py``, ``usercustomize.py``, ``*.pth``), installed-package metadata
    that declares plugins (anything under a ``*.dist-info`` or ``*.egg-info`` folder), and byte code (``*.pyc``,
    anything under ``__pycache__``: pytest runs a cached rewritten test from there, and a sourceless ``.pyc`` is
    imported like a module).
  * **Shadowing** (``shadows``): a module file or package folder named like a module of the check's interpreter (the
    standard library, its built-ins, and every top-level module of its site-packages: ``interpreter_modules``, read
    by running that interpreter, never written out by hand) and sitting where it can come first on ``sys.path``:
    the checkout's root, or any folder that is not a package (no ``__init__.py``), since pytest puts such a folder
    of a test file at the front of ``sys.path``. A module is any file with a suffix the interpreter imports
    (``importlib.machinery.all_suffixes``: ``.py``, ``.pyc``, extension modules).
Pure but for ``interpreter_modules``, which runs the interpreter once per process.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib.machinery
import json
import posixpath
import subprocess
import sys
from collections.abc import Collection

STARTUP_NAMES = frozenset({"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "conftest.py",
                           "sitecustomize.py", "usercustomize.py"})
STARTUP_GLOBS = ("*.pth", "*.pyc")
STARTUP_FOLDERS = ("*.dist-info", "*.egg-info", "__pycache__")
SUFFIXES = tuple(sorted(importlib.machinery.all_suffixes(), key=len, reverse=True))

_PROBE = ("import json, pkgutil, sys; "
          "names = {m.name for m in pkgutil.iter_modules()} | set(sys.stdlib_module_names) "
          "| set(sys.builtin_module_names); print(json.dumps(sorted(names)))")


def is_startup(path: str) -> bool:
    """Whether ``path`` is a start-up file (see the module's rules)."""
    parts = path.split("/")
    if parts[-1] in STARTUP_NAMES or any(fnmatch.fnmatchcase(parts[-1], g) for g in STARTUP_GLOBS):
        return True
    return any(fnmatch.fnmatchcase(folder, g) for folder in parts[:-1] for g in STARTUP_FOLDERS)


def module_name(path: str) -> tuple[str, str] | None:
    """(folder, module name) a path declares, as a module file or as a package's ``__init__``; None otherwise."""
    folder, name = posixpath.split(path)
    if name.startswith("__init__."):
        folder, name = posixpath.split(folder)
        return (folder, name) if name.isidentifier() else None
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            return (folder, stem) if stem.isidentifier() else None
    return None


def shadows(path: str, names: Collection[str], packages: Collection[str]) -> bool:
    """Whether ``path`` (a file of the pushed tree) shadows one of ``names``: a module by that name in a folder that
    may come first on ``sys.path`` (``packages``: the folders of the tree that hold an ``__init__.py``)."""
    found = module_name(path)
    if found is None:
        return False
    folder, name = found
    return name in names and (folder == "" or folder not in packages)


@functools.lru_cache(maxsize=4)
def interpreter_modules(python: str = sys.executable) -> frozenset[str]:
    """Every top-level module name the check's interpreter can import without a checkout: its standard library,
    built-ins and site-packages (run with ``-P`` from ``/``, so that no folder of the caller's counts)."""
    try:
        out = subprocess.run([python, "-P", "-I", "-c", _PROBE], capture_output=True, text=True, timeout=60,
                             check=True, cwd="/")
        found = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        found = []
    if not found:  # the interpreter would not say: at least the standard library of this one
        found = sorted(set(sys.stdlib_module_names) | set(sys.builtin_module_names))
    return frozenset(str(n) for n in found)
