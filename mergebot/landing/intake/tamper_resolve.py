"""What an expression in a parsed file stands for, found without running it: the tamper scan's static evaluator.

``Resolver`` indexes one module's tree once and then answers two questions about any of its expressions:
  * ``qual``: the dotted name it stands for, or None. Names resolve through the file's imports (``import sys as s``,
    ``from os import _exit``), through what the same scope (or an enclosing one) assigns to them (``m = sys.modules``;
    every assignment counts, so reassigning cannot launder a name), through ``getattr(x, "name")``, ``vars(x)``,
    ``x.__dict__["name"]``, ``sys.modules["name"]``, ``__import__("name")`` and ``importlib.import_module("name")``;
    a name bound nowhere in the file that is a builtin is ``builtins.<name>``, ``__builtins__`` is ``builtins``.
  * ``fold``: its value when it is built from constants only (a str, bytes or int), or None: literals, names bound
    to such values, ``+``/``-``/``*``, f-strings without format specs, slices and indexes, ``not``, ``==``, ``join``
    of a literal sequence (also ``reversed`` and ``map(chr, ...)``), ``chr``/``str``/``int``/``bool``/``bytes``,
    case and strip methods, ``replace``, ``encode``/``decode`` in UTF-8, ASCII or Latin-1, ``bytes.fromhex``, the
    base64 and binascii decoders, ``codecs`` rot13/hex/base64/zlib, and ``zlib.decompress``.
Every step is bounded: no string over ``CAP`` characters is built, no int over 64 bits kept, and recursion stops at
``DEPTH``; a name defined through itself stands for nothing. Each node is evaluated once (memoised), so the work is
linear in the size of the file. ``where`` records, for each node, its scope, whether it runs at import time (outside
any function, and outside ``if __name__ == "__main__":``) and its *unit*: the innermost function, else the
module-level statement it belongs to.

Pure: no I/O, and no codec is looked up by a name the file chose.
"""

from __future__ import annotations

import ast
import base64
import binascii
import builtins
import string
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

CAP = 1 << 16  # the longest string a fold builds
DEPTH = 48  # the deepest a fold or a resolution recurses
_INT = 1 << 64

Value = str | bytes | int  # what a fold yields (a bool is an int)

_LOWER, _UPPER = string.ascii_lowercase, string.ascii_uppercase
_ROT13 = str.maketrans(_LOWER + _UPPER, _LOWER[13:] + _LOWER[:13] + _UPPER[13:] + _UPPER[:13])
_BUILTIN_NAMES = frozenset(dir(builtins))
_IMPORTERS = frozenset({"builtins.__import__", "importlib.import_module", "importlib.__import__"})
_TEXT_CODECS = frozenset({"utf-8", "utf8", "ascii", "latin-1", "latin1"})
_STR_METHODS = frozenset({"upper", "lower", "casefold", "swapcase", "title", "capitalize", "strip", "lstrip",
                          "rstrip", "removeprefix", "removesuffix", "replace"})
_FAILS = (ValueError, TypeError, IndexError, OverflowError, LookupError, zlib.error)  # a fold that fails is None
_T = TypeVar("_T")


class _Memo(dict[int, _T | None]):
    """Each node's answer, once: None past ``DEPTH``, and while it is computed (a name defined through itself)."""

    def once(self, node: ast.AST, depth: int, compute: Callable[[ast.AST, int], _T | None]) -> _T | None:
        if id(node) not in self and depth <= DEPTH:
            self[id(node)] = None
            self[id(node)] = compute(node, depth + 1)
        return self.get(id(node))


def _inflate(data: bytes) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, CAP)
    if inflater.unconsumed_tail:
        raise ValueError("too large to fold")
    return out


_DECODERS: dict[str, Callable[[bytes], bytes]] = {
    "base64.b64decode": base64.b64decode, "base64.standard_b64decode": base64.standard_b64decode,
    "base64.urlsafe_b64decode": base64.urlsafe_b64decode, "base64.b32decode": base64.b32decode,
    "base64.b16decode": base64.b16decode, "base64.b85decode": base64.b85decode, "base64.a85decode": base64.a85decode,
    "base64.decodebytes": base64.decodebytes, "binascii.a2b_base64": binascii.a2b_base64,
    "binascii.unhexlify": binascii.unhexlify, "binascii.a2b_hex": binascii.a2b_hex, "zlib.decompress": _inflate,
}
_CODECS = {"hex": "binascii.unhexlify", "hex-codec": "binascii.unhexlify", "base64": "base64.b64decode",
           "base64-codec": "base64.b64decode", "zlib": "zlib.decompress", "zlib-codec": "zlib.decompress"}


@dataclass(eq=False)
class Scope:
    """The names one module, class or function body binds: name -> the expressions assigned to it, if any."""

    parent: Scope | None = None
    is_class: bool = False
    names: dict[str, list[ast.expr]] = field(default_factory=dict)
    loops: dict[str, list[ast.expr]] = field(default_factory=dict)  # for-loop variable -> what it iterates over

    def lookup(self, name: str, loops: bool = False) -> list[ast.expr] | None:
        scope: Scope | None = self
        while scope is not None:
            table = scope.loops if loops else scope.names
            if name in table:
                return table[name]
            scope = scope.parent
        return None


class Resolver:
    """One module's tree, indexed: scopes, imports, where each node runs; then ``qual`` and ``fold`` on demand."""

    def __init__(self, tree: ast.Module, *, at_import: bool = True) -> None:
        self.module = Scope()
        self.where: dict[int, tuple[Scope, bool, int]] = {}  # node -> (scope, runs at import, unit)
        self.order: list[ast.AST] = []  # every node reached, parents before children
        self.imports: dict[str, str] = {}
        self.defs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.bare: set[int] = set()  # string constants that are statements of their own (docstrings)
        self._folds: _Memo[Value] = _Memo()
        self._quals: _Memo[str] = _Memo()
        self._index(tree, at_import)

    def _index(self, tree: ast.Module, at_import: bool) -> None:
        self._bind(tree.body, self.module)
        stack: list[tuple[ast.AST, Scope, bool, int]] = [(tree, self.module, at_import, 0)]
        while stack:
            node, scope, now, unit = stack.pop()
            self.where[id(node)] = (scope, now, unit)
            self.order.append(node)
            outer: list[ast.AST] = list(ast.iter_child_nodes(node))  # run where the node runs
            inner: list[ast.AST] = []
            inside = (scope, now, unit)
            if isinstance(node, ast.Import | ast.ImportFrom):
                self._import(node)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                self.bare.add(id(node.value))
            defaults: list[ast.AST] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.defs.setdefault(node.name, node)
                body = Scope(scope.parent if scope.is_class else scope)
                self._bind([node.args, *node.body], body)
                outer, inner, inside = [*node.decorator_list, *defaults], list(node.body), (body, False, id(node))
            elif isinstance(node, ast.Lambda):
                outer, inner, inside = defaults, [node.body], (scope, False, unit)
            elif isinstance(node, ast.ClassDef):  # a class body runs at import, in a scope of its own
                body = Scope(scope, is_class=True)
                self._bind(node.body, body)
                outer, inner = [*node.bases, *node.keywords, *node.decorator_list], list(node.body)
                inside = (body, now, unit)
            elif isinstance(node, ast.If) and (guard := _main_guard(node)) is not None:
                main, other = (node.body, node.orelse) if guard else (node.orelse, node.body)
                outer, inner, inside = [node.test, *other], list(main), (scope, False, unit)
            stack += [(child, scope, now, id(child) if node is tree else unit) for child in outer]
            stack += [(child, *inside) for child in inner]

    def _bind(self, roots: Iterable[ast.AST], scope: Scope) -> None:
        stack = list(roots)
        while stack:
            node = stack.pop()
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                scope.names.setdefault(node.name, [])
                continue
            if isinstance(node, ast.Lambda):
                continue
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value is not None:
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    pairs = zip(target.elts, node.value.elts, strict=False) if isinstance(target, ast.Tuple) and \
                        isinstance(node.value, ast.Tuple) else [(target, node.value)]  # a, m = 1, sys.modules
                    for name, value in pairs:
                        if isinstance(name, ast.Name):
                            scope.names.setdefault(name.id, []).append(value)
            elif isinstance(node, ast.For | ast.AsyncFor) and isinstance(node.target, ast.Name):
                scope.loops.setdefault(node.target.id, []).append(node.iter)
            elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                scope.names.setdefault(node.id, [])
            elif isinstance(node, ast.arg):
                scope.names.setdefault(node.arg, [])
            stack.extend(ast.iter_child_nodes(node))

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if isinstance(node, ast.Import):
                top = alias.name.split(".")[0]
                self.imports[alias.asname or top] = alias.name if alias.asname else top
            elif alias.name != "*":
                self.imports[alias.asname or alias.name] = f"{'.' * node.level}{node.module or ''}.{alias.name}"

    def names(self, node: ast.Name, *, loops: bool = False) -> list[ast.expr] | None:
        """What the scope of ``node`` (or an enclosing one) assigns to its name; None when nothing binds it."""
        scope = self.where[id(node)][0] if id(node) in self.where else self.module
        return scope.lookup(node.id, loops)

    def qual(self, node: ast.AST, depth: int = 0) -> str | None:
        """The dotted name an expression stands for (``sys.modules``, ``builtins.exec``), or None."""
        return self._quals.once(node, depth, self._qual)

    def _qual(self, node: ast.AST, depth: int) -> str | None:
        if isinstance(node, ast.Name):
            exprs = self.names(node)
            for expr in exprs or ():
                if (name := self.qual(expr, depth)) is not None:
                    return name
            if node.id in self.imports:
                return self.imports[node.id]
            if exprs is None and node.id == "__builtins__":
                return "builtins"
            return f"builtins.{node.id}" if exprs is None and node.id in _BUILTIN_NAMES else None
        if isinstance(node, ast.Attribute):
            base = self.qual(node.value, depth)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Subscript):
            base, key = self.qual(node.value, depth), self.fold(node.slice, depth)
            if not isinstance(key, str):
                return None
            if base == "sys.modules":
                return key
            if base is not None and (base == "builtins" or base.endswith(".__dict__")):
                return f"{base.removesuffix('.__dict__')}.{key}"
            is_globals = isinstance(node.value, ast.Call) and self.qual(node.value.func, depth) == "builtins.globals"
            return "builtins" if is_globals and key == "__builtins__" else None
        if isinstance(node, ast.Call) and node.args:
            func, first = self.qual(node.func, depth), self.fold(node.args[0], depth)
            if func in _IMPORTERS and isinstance(first, str):
                return first.split(".")[0] if func == "builtins.__import__" else first
            base = self.qual(node.args[0], depth)
            if func == "builtins.vars" and base:
                return f"{base}.__dict__"
            attr = self.fold(node.args[1], depth) if len(node.args) > 1 else None
            if func == "builtins.getattr" and base and isinstance(attr, str):
                return f"{base}.{attr}"
        return None

    def fold(self, node: ast.AST, depth: int = 0) -> Value | None:
        """The value of an expression built from constants only, or None."""
        return self._folds.once(node, depth, self._bounded_fold)

    def _bounded_fold(self, node: ast.AST, depth: int) -> Value | None:
        """``_fold``, with a fold that fails, or yields a value over ``CAP`` or ``_INT``, None."""
        try:
            value = self._fold(node, depth)
        except _FAILS:
            return None
        if (isinstance(value, str | bytes) and len(value) > CAP) or (isinstance(value, int) and abs(value) > _INT):
            return None
        return value

    def _fold(self, node: ast.AST, depth: int) -> Value | None:
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str | bytes | int) else None
        if isinstance(node, ast.Name):
            for expr in self.names(node) or ():
                if (value := self.fold(expr, depth)) is not None:
                    return value
            return None
        if isinstance(node, ast.JoinedStr):
            parts: list[str] = []
            for part in node.values:
                if isinstance(part, ast.Constant):
                    parts.append(str(part.value))
                    continue
                if not isinstance(part, ast.FormattedValue) or part.format_spec is not None:
                    return None
                if (value := self.fold(part.value, depth)) is None:
                    return None
                conversion = {ord("r"): repr, ord("a"): ascii}.get(part.conversion, str)
                parts.append(conversion(value))
            return "".join(parts)
        if isinstance(node, ast.BinOp):
            return _binop(node.op, self.fold(node.left, depth), self.fold(node.right, depth))
        if isinstance(node, ast.Subscript):
            return self._subscript(node, depth)
        if isinstance(node, ast.UnaryOp):
            value = self.fold(node.operand, depth)
            if value is not None and isinstance(node.op, ast.Not):
                return not value
            return -value if isinstance(node.op, ast.USub) and isinstance(value, int) else None
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq | ast.NotEq):
            left, right = self.fold(node.left, depth), self.fold(node.comparators[0], depth)
            return None if left is None or right is None else (left == right) == isinstance(node.ops[0], ast.Eq)
        if isinstance(node, ast.IfExp):
            body, orelse = self.fold(node.body, depth), self.fold(node.orelse, depth)
            return body if body is not None and type(body) is type(orelse) and body == orelse else None
        if isinstance(node, ast.Call) and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args):
            return self._call(node, depth)
        return None

    def _subscript(self, node: ast.Subscript, depth: int) -> Value | None:
        base = self.fold(node.value, depth)
        if not isinstance(base, str | bytes):
            return None
        if not isinstance(node.slice, ast.Slice):
            index = self.fold(node.slice, depth)
            return base[index] if type(index) is int else None
        bounds: list[int | None] = []
        for part in (node.slice.lower, node.slice.upper, node.slice.step):
            value = None if part is None else self.fold(part, depth)
            if part is not None and type(value) is not int:
                return None
            bounds.append(value if type(value) is int else None)
        return base[slice(*bounds)]

    def _call(self, node: ast.Call, depth: int) -> Value | None:
        func, args = node.func, node.args
        if isinstance(func, ast.Attribute) and isinstance(recv := self.fold(func.value, depth), str | bytes):
            return self._method(recv, func.attr, args, depth)
        name = self.qual(func, depth)
        values = [self.fold(arg, depth) for arg in args]
        first = values[0] if values else None
        if name in _DECODERS and isinstance(first, str | bytes):
            return _DECODERS[name](first.encode() if isinstance(first, str) else first)
        if name in ("builtins.bytes.fromhex", "builtins.bytearray.fromhex") and isinstance(first, str):
            return bytes.fromhex(first)
        if name in ("codecs.decode", "codecs.encode") and first is not None:
            return _codec(first, values[1] if len(values) > 1 else "utf-8", encode=name == "codecs.encode")
        if len(values) != 1 or first is None:
            return self._bytes(name, args, values, depth)
        if name == "builtins.chr" and type(first) is int:
            return chr(first)
        if name in ("builtins.str", "builtins.int") and isinstance(first, str | int):
            return str(first) if name == "builtins.str" else int(first)
        return bool(first) if name == "builtins.bool" else self._bytes(name, args, values, depth)

    def _bytes(self, name: str | None, args: list[ast.expr], values: list[Value | None], depth: int) -> Value | None:
        if name not in ("builtins.bytes", "builtins.bytearray") or not args:
            return None
        if len(values) == 2 and isinstance(values[0], str) and values[1] in _TEXT_CODECS:
            return values[0].encode(str(values[1]))
        items = self.sequence(args[0], depth)
        return bytes(i for i in items if type(i) is int) if items and all(type(i) is int for i in items) else None

    def _method(self, recv: str | bytes, attr: str, args: list[ast.expr], depth: int) -> Value | None:
        values = [self.fold(arg, depth) for arg in args]
        if attr == "join" and len(args) == 1 and (items := self.sequence(args[0], depth)) is not None:
            if sum(len(i) for i in items if isinstance(i, str | bytes)) + len(recv) * len(items) > CAP:
                return None
            strs, raws = [i for i in items if isinstance(i, str)], [i for i in items if isinstance(i, bytes)]
            if isinstance(recv, str) and len(strs) == len(items):
                return recv.join(strs)
            return recv.join(raws) if isinstance(recv, bytes) and len(raws) == len(items) else None
        if attr in ("decode", "encode") and len(values) <= 1:
            codec = values[0] if values else "utf-8"
            if not (isinstance(codec, str) and codec.lower().replace("_", "-") in _TEXT_CODECS):
                return None
            if attr == "decode" and isinstance(recv, bytes):
                return recv.decode(codec, "replace")
            return recv.encode(codec) if attr == "encode" and isinstance(recv, str) else None
        if attr not in _STR_METHODS or len(values) > 2 or not all(isinstance(v, type(recv)) for v in values):
            return None
        new = values[1] if attr == "replace" and len(values) == 2 else ""
        if isinstance(new, str | bytes) and len(recv) + (len(recv) + 1) * len(new) > CAP:  # a bound on what it builds
            return None
        result = getattr(recv, attr)(*values)
        return result if isinstance(result, str | bytes) else None

    def sequence(self, node: ast.AST, depth: int = 0) -> list[Value] | None:
        """The items of a sequence built from constants (a literal list or tuple, reversed, map(chr, ...), a str)."""
        if isinstance(node, ast.List | ast.Tuple):
            items = [self.fold(e, depth) for e in node.elts]
            known = [i for i in items if i is not None]
            return known if len(known) == len(items) else None
        if isinstance(node, ast.Call) and node.args and not node.keywords:
            func, rest = self.qual(node.func, depth), self.sequence(node.args[-1], depth + 1)
            if func in ("builtins.reversed", "builtins.list", "builtins.tuple") and len(node.args) == 1:
                return rest[::-1] if rest is not None and func == "builtins.reversed" else rest
            is_chr = len(node.args) == 2 and self.qual(node.args[0], depth) == "builtins.chr"
            if func == "builtins.map" and is_chr and rest is not None and all(type(i) is int for i in rest):
                return [chr(i) for i in rest if type(i) is int]
            return None
        value = self.fold(node, depth)
        return list(value) if isinstance(value, str | bytes) else None


def _binop(op: ast.operator, left: Value | None, right: Value | None) -> Value | None:
    if isinstance(left, str) and isinstance(right, str):
        return left + right if isinstance(op, ast.Add) else None
    if isinstance(left, bytes) and isinstance(right, bytes):
        return left + right if isinstance(op, ast.Add) else None
    if isinstance(left, int) and isinstance(right, int):
        return left + right if isinstance(op, ast.Add) else left - right if isinstance(op, ast.Sub) \
            else left * right if isinstance(op, ast.Mult) else None
    seq, times = (left, right) if isinstance(right, int) else (right, left)
    if isinstance(op, ast.Mult) and isinstance(seq, str | bytes) and isinstance(times, int):
        return seq * times if len(seq) * max(times, 0) <= CAP else None
    return None


def _codec(value: Value, encoding: Value | None, *, encode: bool) -> Value | None:
    """codecs.decode/encode for the few codecs worth folding; never a codec looked up by the file's own name."""
    codec = encoding.lower().replace("_", "-") if isinstance(encoding, str) else ""
    if codec in ("rot13", "rot-13") and isinstance(value, str):
        return value.translate(_ROT13)
    if codec in _CODECS and not encode and isinstance(value, str | bytes):
        return _DECODERS[_CODECS[codec]](value.encode() if isinstance(value, str) else value)
    if codec in _TEXT_CODECS and isinstance(value, bytes) and not encode:
        return value.decode(codec, "replace")
    return value.encode(codec) if codec in _TEXT_CODECS and isinstance(value, str) and encode else None


def _main_guard(node: ast.If) -> bool | None:
    """True for ``if __name__ == "__main__":`` (its body is the script), False for ``!=`` (its else), else None."""
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq | ast.NotEq)):
        return None
    sides = (test.left, test.comparators[0])
    named = any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
    main = any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
    return isinstance(test.ops[0], ast.Eq) if named and main else None
