"""What a check's interpreter and pytest read at start-up from a checkout, and which module names it must not shadow.

Rules:
  * **Start-up files** (``is_startup``): files Python or pytest reads before the first test, or instead of the
    source it was given: pytest's configuration (``pytest.ini``, ``.pytest.ini``, ``pytest.toml``, ``.pytest.toml``,
    ``tox.ini``; the sections of ``setup.cfg`` and ``pyproject.toml`` are compared apart), ``conftest.py``, the
    interpreter's own hooks (``sitecustomize.py``, ``usercustomize.py``, ``*.pth``), installed-package metadata
    that declares plugins (anything under a ``*.dist-info`` or ``*.egg-info`` folder), byte code (``*.pyc``,
    anything under ``__pycache__``: pytest runs a cached rewritten test from there, and a sourceless ``.pyc`` is
    imported like a module) and extension modules (``*.so``, ``*.pyd``: imported before a ``.py`` of the same name,
    and nothing a reviewer or the tamper signal can read).
  * **Shadowing** (``shadows``): a module file or package folder named like a module of the check's interpreter (the
    standard library, its built-ins, and every top-level module of its site-packages: ``interpreter_modules``, read
    by running that interpreter, never written out by hand) and sitting where it can come first on ``sys.path``
    (``path_roots``): the checkout's root, ``src``, or a folder that is no package but holds test modules, since
    pytest puts such a folder of a test file at the front of ``sys.path``. A package's own modules (``pkg/json.py``,
    ``pkg/email/__init__.py`` with ``pkg/__init__.py``) are imported by their full name and shadow nothing.
    A module is any file with a suffix the interpreter imports (``importlib.machinery.all_suffixes``: ``.py``,
    ``.pyc``, extension modules).
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
from collections.abc import Callable, Collection

STARTUP_NAMES = frozenset({"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "conftest.py",
                           "sitecustomize.py", "usercustomize.py"})
STARTUP_GLOBS = ("*.pth", "*.pyc", "*.so", "*.pyd")  # byte code and extension modules: imported, never reviewable
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


def shadows(path: str, names: Collection[str], roots: Collection[str]) -> bool:
    """Whether ``path`` (a file of the pushed tree) shadows one of ``names``: a module by that name in one of ``roots``,
    the folders of the tree that may come first on ``sys.path`` (``path_roots``)."""
    found = module_name(path)
    if found is None:
        return False
    folder, name = found
    return name in names and folder in roots


def path_roots(folders: Collection[str], is_package: Callable[[str], bool],
               holds_tests: Callable[[str], bool]) -> set[str]:
    """Which of ``folders`` may come first on ``sys.path``: the checkout's root, ``src``, and any other folder that is
    not a package but holds test modules (pytest puts such a folder of a test file first)."""
    return {f for f in folders if f in ("", "src") or (not is_package(f) and holds_tests(f))} - \
        {f for f in folders if f and is_package(f)}


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
