"""How each tamper rule is matched on one parsed version of one file (``analyse``): the rules' detail is in
``mergebot.landing.intake.tamper``, names and constants come from ``mergebot.landing.intake.tamper_resolve``. A *unit*
is one function, else one module-level statement; "now" is at import: outside any function and outside
``if __name__ == "__main__":``.
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from collections.abc import Iterable, Iterator

from mergebot.landing.intake.tamper_resolve import Resolver, Value

_EXEC_DEPTH = 2  # levels of exec'd source scanned

_STRING_RULES = (
    ("outcome_channel", re.compile(r"VERIFIER_OUTCOMES|mergebot_outcomes|/proc/(?:self|\d+)/fd|/dev/fd/")),
    ("pytest_env", re.compile(r"PYTEST_[A-Z]")),  # PYTEST_CURRENT_TEST, PYTEST_ADDOPTS, PYTEST_VERSION...
    ("held_out", re.compile(r"/held-out|VERIFIER_HELD_OUT")),
)
_HELD = re.compile(r"held[-_]?out", re.IGNORECASE)
_HELD_PATH = re.compile(r"[/\\][\w.-]*held[-_]?out|held[-_]?out[\w.-]*[/\\]", re.IGNORECASE)  # in one path
_ENV_NAME = re.compile(r"[A-Z0-9_]+")
_PYTEST_WORD = re.compile(r"(?:.*[/\\ ])?_?py\.?test(?:[.\-_]\w*)*")  # pytest, _pytest, py.test, /usr/bin/pytest
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_PYTEST = frozenset({"pytest", "_pytest"})
_MUTATORS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"})
_DICT_WRITES = frozenset({"operator.setitem", "operator.delitem", *(f"builtins.dict.{m}" for m in _MUTATORS)})
_BUILTINS = frozenset({"builtins", "builtins.__dict__"})
_BUILTIN_WRITES = frozenset(f"{b}.{m}" for b in _BUILTINS for m in _MUTATORS)
_SETATTR = frozenset({"builtins.setattr", "builtins.delattr", "builtins.object.__setattr__"})
_MODULES = "sys.modules"
_MODULE_GETS = frozenset({"sys.modules.get", "sys.modules.setdefault", "sys.modules.pop"})
_EQ = frozenset({"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__"})
_CODE = frozenset({"builtins.exec", "builtins.eval", "builtins.compile"})
_LOADERS = frozenset({"marshal.loads", "types.FunctionType", "types.CodeType"})
_HARD_EXITS = frozenset({"os._exit", "os.abort", "posix._exit", "os.kill", "signal.raise_signal"})
_EXITS = _HARD_EXITS - {"os.kill"} | {"sys.exit", "builtins.exit", "builtins.quit"}
_ATEXIT_EXITS = _HARD_EXITS | {"sys.exit"}  # an atexit hook's sys.exit still sets the status
_EXIT_RAISES = frozenset({"builtins.SystemExit", "builtins.KeyboardInterrupt"})
_FD_CALLS = frozenset({"os.write", "os.writev", "os.fdopen", "os.dup", "os.dup2", "builtins.open", "io.open"})
_ENV_READS = frozenset({"os.environ.get", "os.environ.__getitem__", "os.environ.__contains__", "os.environ.pop",
                        "os.getenv", "os.environ.setdefault", "os.environb.get", "os.getenvb"})
_ENVIRON = frozenset({"os.environ", "os.environb"})
_PATHS = frozenset({"builtins.open", "io.open", "pathlib.Path", "pathlib.PurePath", "os.listdir", "os.scandir",
                    "os.walk", "os.stat", "glob.glob", "os.path.exists", "os.path.isdir", "os.path.isfile",
                    "os.path.join", "glob.iglob", "shutil.copy", "shutil.copytree"})
_FINDERS = frozenset({"builtins.__import__", "importlib.import_module", "importlib.__import__",
                      "importlib.util.find_spec", "pkgutil.find_loader"})
_MENTIONS = frozenset({"sys.argv", "sys.orig_argv", "sys.modules", "os.environ"})
_PROBES = frozenset({"startswith", "endswith", "find", "rfind", "index", "count", "get", "__contains__",
                     "__getitem__", "search", "match", "fullmatch", "fnmatch"})
_FRAMES = frozenset({"inspect.stack", "inspect.currentframe", "inspect.getouterframes", "inspect.trace",
                     "sys._getframe", "sys._current_frames", "traceback.extract_stack", "traceback.walk_stack"})
_TRACES = frozenset({"sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.call_tracing", "threading.settrace",
                     "threading.setprofile", "threading.settrace_all_threads", "threading.setprofile_all_threads"})
_GC = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
_FUNC_ATTRS = frozenset({"__code__", "__globals__", "__closure__", "__defaults__", "__kwdefaults__", "f_locals",
                         "f_globals", "f_back", "f_code", "co_name", "co_code"})
_FUNC_QUALS = frozenset({"types.FunctionType", "types.FrameType", "types.CodeType", "types.MethodType",
                         "inspect.isfunction", "inspect.isframe", "inspect.ismethod", "inspect.isroutine",
                         "inspect.iscode", "builtins.callable"})
_FUNC_WORDS = _FUNC_ATTRS | {"function", "frame", "code", "method"}  # also hasattr(f, "__code__")
_FRAME_ATTRS = frozenset({"f_locals", "f_globals", "f_lineno", "f_trace"})
# Standard-library attributes that honest code sets at import time: hooks and switches, not functions.
_SETTABLE = frozenset({"sys.stdout", "sys.stderr", "sys.stdin", "sys.excepthook", "sys.displayhook", "sys.path",
                       "sys.unraisablehook", "sys.breakpointhook", "sys.tracebacklimit", "sys.dont_write_bytecode",
                       "threading.excepthook", "logging.raiseExceptions", "warnings.showwarning"})


def analyse(text: str, *, at_import: bool = True, depth: int = 0) -> set[tuple[int, str]]:
    """(line, rule) for each finding in one version of a file; the string rules alone when it does not parse."""
    try:
        with warnings.catch_warnings():  # invalid escapes and the like are the author's business, not ours
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
        return _Rules(tree, _LINE_BREAK.split(text), at_import=at_import, depth=depth).found
    except (SyntaxError, ValueError, OverflowError, RecursionError):  # RecursionError: nested beyond reason
        return {(n, rule) for n, line in enumerate(_LINE_BREAK.split(text), 1)
                for rule, pattern in _STRING_RULES if pattern.search(line)}


class _Rules:
    """Every rule, matched node by node over one parsed version of a file."""

    def __init__(self, tree: ast.Module, lines: list[str], *, at_import: bool, depth: int) -> None:
        resolver = Resolver(tree, at_import=at_import)
        self.qual, self.fold, self.names = resolver.qual, resolver.fold, resolver.names
        self.where, self.defs, self.bare = resolver.where, resolver.defs, resolver.bare
        self.lines, self.depth = lines, depth
        self.found: set[tuple[int, str]] = set()
        self.units: dict[str, set[int]] = {"test": set(), "func": set(), "mention": set()}  # what each unit has
        self.later: list[tuple[str, int, ast.AST, str]] = []  # (what its unit must have, unit, node, rule)
        self.exiting: dict[tuple[int, frozenset[str]], bool] = {}  # (def, exits) -> whether calling it exits
        for node in resolver.order:
            _, at_import, unit = self.where[id(node)]
            self._check(node, at_import, unit)
        for kind, unit, node, rule in self.later:
            if unit in self.units[kind]:
                self._hit(node, rule)

    def _hit(self, node: ast.AST, rule: str, pattern: re.Pattern[str] | None = None) -> None:
        """A finding on the node's first line, or with ``pattern`` on the first of its lines that matches it."""
        first: int = getattr(node, "lineno", 0)
        last: int = getattr(node, "end_lineno", None) or first
        lines = range(first, min(last, len(self.lines)) + 1) if pattern is not None and last > first else ()
        self.found.add((next((n for n in lines if pattern and pattern.search(self.lines[n - 1])), first), rule))

    def _check(self, node: ast.AST, now: bool, unit: int) -> None:
        if isinstance(node, ast.Constant | ast.JoinedStr | ast.BinOp | ast.Call | ast.Subscript):
            self._strings(node, unit)
        path_join = isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)  # Path("/") / "held-out"
        if path_join and any(_HELD.search(str(self.fold(n))) for n in ast.iter_child_nodes(node)):
            self._hit(node, "held_out")
        if isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
            name = self.qual(node)
            if name in _MENTIONS:
                self.units["mention"].add(unit)
            if name in _FUNC_QUALS or (isinstance(node, ast.Attribute) and node.attr in _FUNC_ATTRS):
                self.units["func"].add(unit)
            if name in ("unittest.mock.ANY", "mock.ANY"):  # equal to everything, like a constant __eq__
                self._hit(node, "constant_eq")
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if (isinstance(node, ast.Import) or node.level == 0) and any(m.split(".")[0] in _PYTEST for m in modules):
                self._hit(node, "pytest_env")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            for target in (t for root in targets for t in ast.walk(root)):  # a.b = ..., (x, m[k]) = ..., del m[k]
                if isinstance(target, ast.Attribute | ast.Subscript) and not isinstance(target.ctx, ast.Load):
                    self._write(target, None if isinstance(node, ast.Delete) else node.value, now)
        elif isinstance(node, ast.Call):
            self._call(node, now, unit)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            base, key = self.qual(node.value), self.fold(node.slice)
            if base == "sys.modules" and isinstance(key, str) and key.split(".")[0] in _PYTEST:
                self._hit(node, "pytest_env")
            if base in _ENVIRON:
                self._env(node, key)
        elif isinstance(node, ast.Compare):
            self._compare(node, unit)
        elif isinstance(node, ast.Raise) and now and node.exc is not None:
            if self.qual(node.exc.func if isinstance(node.exc, ast.Call) else node.exc) in _EXIT_RAISES:
                self._hit(node, "exit_at_import")
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                method: ast.AST
                if isinstance(stmt, ast.Assign):  # __eq__ = lambda self, other: True
                    named, method = any(getattr(t, "id", "") in _EQ for t in stmt.targets), stmt.value
                elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                    named, method = stmt.name in _EQ, stmt
                if isinstance(stmt, ast.Assign | ast.FunctionDef | ast.AsyncFunctionDef) and named \
                        and self._returns_constant(method):
                    self._hit(stmt, "constant_eq")
        elif isinstance(node, ast.Dict):  # type("R", (), {"__eq__": lambda s, o: True})
            for name_node, value_node in zip(node.keys, node.values, strict=True):
                if name_node is not None and self.fold(name_node) in _EQ and self._returns_constant(value_node):
                    self._hit(name_node, "constant_eq")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                if self.qual(decorator) == "atexit.register" and self._exits(node.body, _ATEXIT_EXITS):
                    self._hit(decorator, "exit_at_import")

    def _strings(self, node: ast.AST, unit: int) -> None:
        value = self.fold(node)
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        if not isinstance(text, str):
            return
        for rule, pattern in _STRING_RULES:
            if pattern.search(text):
                self._hit(node, rule, pattern)  # in a docstring, the line that names it
        if _HELD_PATH.search(text) or (_HELD.search(text) and _ENV_NAME.fullmatch(text)):
            self._hit(node, "held_out", _HELD_PATH)
        if id(node) not in self.bare:  # a docstring that says "tests" inspects nothing
            if "test" in text.lower():
                self.units["test"].add(unit)
            if text in _FUNC_WORDS:
                self.units["func"].add(unit)

    def _write(self, target: ast.expr, value: ast.expr | None, now: bool) -> None:
        if isinstance(target, ast.Attribute):
            self._set(target, target.value, target.attr, value, now)
        if not isinstance(target, ast.Subscript):
            return
        base = self.qual(target.value)
        into_module = isinstance(target.value, ast.Attribute) and target.value.attr == "__dict__" and \
            self._via_modules(target.value.value)
        if base == "sys.modules" or into_module:
            self._hit(target, "sys_modules_write")
        elif base in _BUILTINS or (now and base is not None and base.endswith(".__dict__") and _stdlib(base)):
            self._hit(target, "builtins_write")
        if isinstance(target.value, ast.Attribute) and target.value.attr in _FRAME_ATTRS:
            self._hit(target, "trace_hook")

    def _set(self, node: ast.AST, obj: ast.expr, attr: str | None, value: ast.expr | None, now: bool) -> None:
        """``obj.attr = value``, written as an assignment or as ``setattr(obj, attr, value)``."""
        base = self.qual(obj)
        patches_stdlib = now and base is not None and _stdlib(base) and f"{base}.{attr}" not in _SETTABLE
        if (base == "sys" and attr == "modules") or self._via_modules(obj):
            self._hit(node, "sys_modules_write")
        elif base == "builtins" or (patches_stdlib and not (attr or "").isupper()):  # constants are settings
            self._hit(node, "builtins_write")
        if attr in _FRAME_ATTRS:
            self._hit(node, "trace_hook")
        if attr in _EQ and value is not None and self._returns_constant(value):
            self._hit(node, "constant_eq")

    def _via_modules(self, expr: ast.expr, depth: int = 0) -> bool:
        """Whether ``expr`` is a module taken from sys.modules (other than the module's own, ``__name__``)."""
        if isinstance(expr, ast.Subscript):
            return self.qual(expr.value) == _MODULES and getattr(expr.slice, "id", None) != "__name__"
        if isinstance(expr, ast.Call):
            own = bool(expr.args) and getattr(expr.args[0], "id", None) == "__name__"
            return self.qual(expr.func) in _MODULE_GETS and not own
        if isinstance(expr, ast.Name) and depth < 8:
            return any(self._via_modules(e, depth + 1) for e in self.names(expr) or ())
        return False

    def _call(self, node: ast.Call, now: bool, unit: int) -> None:
        name, args = self.qual(node.func) or "", node.args
        short = node.func.attr if isinstance(node.func, ast.Attribute) else name.rsplit(".", 1)[-1]
        first = self.qual(args[0]) if args else None
        if (name.startswith("sys.modules.") and short in _MUTATORS) or (name in _DICT_WRITES and first == _MODULES):
            self._hit(node, "sys_modules_write")
        if name in _BUILTIN_WRITES or (name in _DICT_WRITES and first in _BUILTINS):
            self._hit(node, "builtins_write")
        if name in _SETATTR and len(args) >= 2:
            attr = self.fold(args[1])
            self._set(node, args[0], attr if isinstance(attr, str) else None, args[2] if len(args) > 2 else None, now)
        if name in _FD_CALLS and any(self._raw_fd(arg) for arg in args[:2]):
            self._hit(node, "outcome_channel")
        if name in _ENV_READS and args:
            self._env(node, self.fold(args[0]))
        if name in _PATHS and any(_HELD.search(v) for v in map(self.fold, args) if isinstance(v, str)):
            self._hit(node, "held_out")
        module = self.fold(args[0]) if name in _FINDERS and args else None
        if isinstance(module, str) and module.split(".")[0] in _PYTEST:
            self._hit(node, "pytest_env")
        if short in _PROBES and any(_pytest_word(self.fold(arg)) for arg in args):
            self._probe(node, node.func, unit)
        if name in _FRAMES:
            self.later.append(("test", unit, node, "pytest_env"))
        if name in _TRACES or name.startswith("sys.monitoring.") or short.startswith("PyFrame_"):
            self._hit(node, "trace_hook")
        if name in _GC:
            self.later.append(("func", unit, node, "trace_hook"))
        kills_self = name == "os.kill" and bool(args) and isinstance(args[0], ast.Call) \
            and self.qual(args[0].func) == "os.getpid"
        calls_exit = isinstance(node.func, ast.Name) and (fn := self.defs.get(node.func.id)) is not None \
            and self._exits(fn.body, _HARD_EXITS)
        if now and (name in _EXITS or kills_self or calls_exit):
            self._hit(node, "exit_at_import")
        at_exit = name == "atexit.register" and bool(args) and self._exits_when_called(args[0], _ATEXIT_EXITS)
        handed = [*args, *(k.value for k in node.keywords)]  # Timer(1, os._exit), signal.signal(SIGTERM, ...)
        if at_exit or (now and any(self._exits_when_called(arg, _HARD_EXITS) for arg in handed)):
            self._hit(node, "exit_at_import")
        if name in _CODE and args:
            self._code(node, args[0], now)
        if name in _LOADERS or (name == "pickle.loads" and args and isinstance(self.fold(args[0]), bytes)):
            self._hit(node, "dynamic_code")

    def _code(self, node: ast.Call, source: ast.expr, now: bool) -> None:
        if not (isinstance(source, ast.Constant) and isinstance(source.value, str)):
            self._hit(node, "dynamic_code")
        code = self.fold(source)
        if self.depth < _EXEC_DEPTH and isinstance(code, str | bytes):
            text = code.decode("utf-8", "replace") if isinstance(code, bytes) else code
            for _, rule in analyse(text, at_import=now, depth=self.depth + 1):
                self._hit(node, rule)

    def _compare(self, node: ast.Compare, unit: int) -> None:
        sides = [node.left, *node.comparators]
        for left, op, right in zip(sides, node.ops, sides[1:], strict=False):
            if isinstance(op, ast.In | ast.NotIn) and self._mentions(right, _ENVIRON):
                self._env(node, self.fold(left))
            if isinstance(op, ast.In | ast.NotIn | ast.Eq | ast.NotEq):
                for word, other in ((left, right), (right, left)):
                    items = word.elts if isinstance(word, ast.Tuple | ast.List | ast.Set) else [word]
                    if any(_pytest_word(self.fold(item)) for item in items):
                        self._probe(node, other, unit)

    def _probe(self, node: ast.AST, subject: ast.AST, unit: int) -> None:
        """A "pytest" compared with something: pytest_env when it is sys.argv, sys.modules or os.environ, or when
        its unit reads one of those (``any("pytest" in a for a in sys.argv)``)."""
        if self._mentions(subject, _MENTIONS):
            self._hit(node, "pytest_env")
        else:
            self.later.append(("mention", unit, node, "pytest_env"))

    def _env(self, node: ast.AST, key: Value | None) -> None:
        if isinstance(key, str) and key.upper().startswith("PYTEST"):
            self._hit(node, "pytest_env")
        if isinstance(key, str) and _HELD.search(key):
            self._hit(node, "held_out")

    def _mentions(self, expr: ast.AST, names: frozenset[str]) -> bool:
        return any(isinstance(n, ast.Name | ast.Attribute) and self.qual(n) in names for n in ast.walk(expr))

    def _raw_fd(self, expr: ast.expr) -> bool:
        """Whether ``expr`` is a constant descriptor in 3..255, or a loop variable running over one."""
        if isinstance(expr, ast.Name) and (iterables := self.names(expr, loops=True)):
            return any(self._covers_fd(it) for it in iterables)
        value = self.fold(expr)
        return type(value) is int and 3 <= value <= 255

    def _covers_fd(self, iterable: ast.expr) -> bool:
        if isinstance(iterable, ast.Tuple | ast.List):
            return any(self._raw_fd(e) for e in iterable.elts)
        if isinstance(iterable, ast.Call) and self.qual(iterable.func) == "builtins.range":
            bounds = [self.fold(arg) for arg in iterable.args[:4]]
            ints = [b for b in bounds if type(b) is int]
            if len(ints) == len(bounds) and 0 < len(ints) < 4 and (len(ints) < 3 or ints[2] != 0):
                span = range(*ints)
                return any(fd in span for fd in range(3, 256))
        return False

    def _exits(self, body: Iterable[ast.AST], exits: frozenset[str], depth: int = 0) -> bool:
        """Whether ``body`` calls one of ``exits``, itself or through the file's own defs (a few calls deep)."""
        for call in (n for root in body for n in ast.walk(root) if isinstance(n, ast.Call)):
            if self.qual(call.func) in exits:
                return True
            fn = self.defs.get(call.func.id) if isinstance(call.func, ast.Name) and depth < 4 else None
            if fn is not None and (id(fn), exits) not in self.exiting:
                self.exiting[id(fn), exits] = False  # while it is being read: a recursive def exits by other calls
                self.exiting[id(fn), exits] = self._exits(fn.body, exits, depth + 1)
            if fn is not None and self.exiting[id(fn), exits]:
                return True
        return False

    def _exits_when_called(self, expr: ast.expr, exits: frozenset[str]) -> bool:
        """Whether a callable handed over ends the process: os._exit itself, or a lambda or a def calling it."""
        if isinstance(expr, ast.Lambda):
            return self._exits([expr.body], exits)
        if self.qual(expr) in exits:
            return True
        if isinstance(expr, ast.Call) and self.qual(expr.func) == "functools.partial" and expr.args:
            return self._exits_when_called(expr.args[0], exits)
        return isinstance(expr, ast.Name) and (fn := self.defs.get(expr.id)) is not None and self._exits(fn.body, exits)

    def _returns_constant(self, expr: ast.AST, depth: int = 0) -> bool:
        """Whether ``expr`` (a def, a lambda, a name for one) returns one constant, whatever it is given."""
        if isinstance(expr, ast.FunctionDef | ast.AsyncFunctionDef):
            return self._constant_def(expr)
        if isinstance(expr, ast.Lambda):
            return self.fold(expr.body) is not None
        if not isinstance(expr, ast.Name) or depth > 8:
            return False
        if any(self._returns_constant(e, depth + 1) for e in self.names(expr) or ()):
            return True
        return (fn := self.defs.get(expr.id)) is not None and self._constant_def(fn)

    def _constant_def(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """Every path of ``fn`` returns the same constant (not None: ``NotImplemented`` or a field is honest)."""
        values: set[Value] = set()
        for node in _local(fn.body):
            if isinstance(node, ast.Yield | ast.YieldFrom | ast.Await):
                return False
            if isinstance(node, ast.Return):
                if node.value is None or (value := self.fold(node.value)) is None:
                    return False
                values.add(value)
        return len(values) == 1 and _ends(fn.body)


def _stdlib(name: str) -> bool:
    return name.split(".")[0] in sys.stdlib_module_names


def _pytest_word(value: Value | None) -> bool:
    return isinstance(value, str) and len(value) < 100 and _PYTEST_WORD.fullmatch(value.strip().lower()) is not None


def _local(roots: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """The nodes of a body, without those of the functions and classes defined inside it."""
    stack = list(roots)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


def _ends(body: list[ast.stmt]) -> bool:
    """Whether a block always returns or raises (never falls off its end, which would return None)."""
    last = body[-1] if body else None
    if isinstance(last, ast.If):
        return _ends(last.body) and _ends(last.orelse)
    if isinstance(last, ast.With | ast.AsyncWith):
        return _ends(last.body)
    if isinstance(last, ast.Try):
        handled = all(_ends(h.body) for h in last.handlers)
        return _ends(last.finalbody) or (handled and (_ends(last.body) or _ends(last.orelse)))
    return isinstance(last, ast.Return | ast.Raise)
