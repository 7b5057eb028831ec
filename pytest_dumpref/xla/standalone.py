"""A runnable single-file listing of some of this package's functions, cut from its source.

The write-up lists the fusion model so that a reader can run it with plain jax on a dump of
their own, without this package.  Listing whole modules would put 170 KB of source on the
page (hlo.py alone is 60 KB, most of it the parser's corner cases for hand-written HLO);
listing chosen functions by hand leaves out the helper someone forgets (the first listing
left out the opcode sets and a dozen helpers).  ``listing`` does neither: from a few roots it
takes every top-level definition they reach, transitively (functions, classes, constants,
through a function's own ``from .x import y``), each whole and in its module's order, and
the imports of the standard library and numpy they use.  What it leaves out is what the roots
never reach; a name it cannot place raises, naming the module and the definition.
"""
from __future__ import annotations

import ast
import builtins
import importlib
import inspect

PACKAGE = "pytest_dumpref.xla"


class ListingError(ValueError):
    """A root or a name the listing cannot place; the message names the module."""


class _Module:
    """One module's top-level definitions: name -> (first line, last line, names it reads)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = inspect.getsource(importlib.import_module(f"{PACKAGE}.{name}"))
        self.lines = self.source.split("\n")
        self.defs: dict[str, tuple[int, int, set]] = {}
        self.imports: dict[str, str] = {}        # name -> import statement (not of this package)
        self.relative: dict[str, str] = {}       # name -> sibling module it is imported from
        self.dropped: dict[str, list] = {}       # def -> (first, last) lines of local relative imports
        for node in ast.parse(self.source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self._import(node, top=True)
                continue
            names = _bound(node)
            if not names:
                continue
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            reads = _free_names(node)
            local = []
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and sub.level:
                    for a in sub.names:
                        self.relative.setdefault(a.asname or a.name, sub.module)
                        reads.add(a.asname or a.name)
                    local.append((sub.lineno, sub.end_lineno))
            for bound in names:
                self.defs[bound] = (first, node.end_lineno, reads - {bound})
                self.dropped[bound] = local

    def _import(self, node, top: bool) -> None:
        if isinstance(node, ast.ImportFrom) and node.level:
            for a in node.names:
                self.relative[a.asname or a.name] = node.module
            return
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            return
        for a in node.names:
            bound = (a.asname or a.name).split(".")[0]
            if isinstance(node, ast.ImportFrom):
                stmt = f"from {node.module} import {a.name}" + (f" as {a.asname}" if a.asname else "")
            else:
                stmt = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
            self.imports[bound] = stmt

    def text(self, name: str) -> str:
        first, last, _ = self.defs[name]
        keep = [k for k in range(first, last + 1)
                if not any(a <= k <= b for a, b in self.dropped[name])]
        return "\n".join(self.lines[k - 1] for k in keep)


def _free_names(node) -> set:
    """The names a definition reads and does not bind itself (its locals, arguments,
    comprehension and loop variables are not the module's)."""
    loads, binds = set(), set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else binds).add(n.id)
        elif isinstance(n, ast.arg):
            binds.add(n.arg)
        elif (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not node) \
                or (isinstance(n, ast.ExceptHandler) and n.name):
            binds.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)) and not getattr(n, "level", 0):
            binds.update((a.asname or a.name).split(".")[0] for a in n.names)
    return loads - binds


def _bound(node) -> list:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def listing(roots: dict, *, order: tuple, header: str = "") -> str:
    """One Python file holding ``roots`` ({module: [names]}, modules of pytest_dumpref.xla)
    and everything they reach, modules in ``order``, definitions in source order, each
    module's part headed by a comment naming its file."""
    mods = {m: _Module(m) for m in order}
    keep: dict[str, set] = {m: set() for m in order}
    todo = [(m, n) for m, names in roots.items() for n in names]
    imports: dict[str, str] = {}
    while todo:
        m, name = todo.pop()
        if m not in mods:
            raise ListingError(f"{PACKAGE}.{m}: reached (for {name}) but not in the listing's "
                               f"module order {order}")
        mod = mods[m]
        if name in mod.relative:
            todo.append((mod.relative[name], name))
            continue
        if name in mod.imports:
            imports.setdefault(mod.imports[name], m)
            continue
        if name not in mod.defs:
            if hasattr(builtins, name):
                continue
            raise ListingError(f"{PACKAGE}.{m}: {name!r} is read but defined nowhere at its top level")
        if name in keep[m]:
            continue
        keep[m].add(name)
        todo.extend((m, r) for r in mod.defs[name][2])
    placed: dict[str, str] = {}
    for m in order:
        for name in keep[m]:
            if name in placed and mods[placed[name]].text(name) != mods[m].text(name):
                raise ListingError(f"{name!r} is defined differently in {PACKAGE}.{placed[name]} and "
                                   f"{PACKAGE}.{m}: the one-file listing cannot hold both")
            placed.setdefault(name, m)
    parts = [header.rstrip("\n"), "from __future__ import annotations", ""]
    parts += sorted(imports, key=lambda s: (s.startswith("from"), s))
    for m in order:
        mod = mods[m]
        # a definition binding several names (a, b = ...) is listed once
        spans = sorted({mod.defs[n][:2] for n in keep[m] if placed.get(n) == m})
        if not spans:
            continue
        parts += ["", "", f"# ---- from pytest_dumpref/xla/{m}.py " + "-" * max(0, 60 - len(m))]
        names_at = {mod.defs[n][:2]: n for n in keep[m]}
        for span in spans:
            parts += ["", mod.text(names_at[span])]
    return "\n".join(parts).strip("\n") + "\n"
