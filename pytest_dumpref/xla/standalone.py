"""A runnable single-file listing of some of this package's functions, cut from its source.

The write-up lists the fusion model so that a reader can run it with plain jax on a dump of
their own, without this package.  The five modules it uses whole are 166 KB of source (the
listing of what it reaches is 119 KB: dump.py's compile and hashing machinery, for one, is
not reached); listing chosen functions by hand leaves out the helper someone forgets (the
first listing left out the opcode sets and a dozen helpers).  ``listing`` does neither: from a few roots it
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
import types
from pathlib import Path

PACKAGE = "pytest_dumpref.xla"
ROOT = Path(__file__).resolve().parents[2]


class ListingError(ValueError):
    """A root or a name the listing cannot place; the message names the module."""


class _Module:
    """One module's top-level definitions: name -> (first line, last line, names it reads),
    and where each name it imports comes from."""

    def __init__(self, module, listed: set) -> None:
        source_file = inspect.getsourcefile(module)
        if source_file is None:
            raise ListingError(f"{module.__name__}: no Python source to list")
        path = Path(source_file).resolve()
        self.name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
        self.package = module.__package__ or ""
        self.source = inspect.getsource(module)
        self.lines = self.source.split("\n")
        self.listed = listed
        self.defs: dict[str, tuple[int, int, set]] = {}
        self.imports: dict[str, str] = {}        # name -> import statement, of an unlisted module
        self.routed: dict[str, tuple] = {}       # name -> (listed module, its name there or None)
        self.dropped: dict[str, list] = {}       # def -> (first, last) lines of imports of listed modules
        self.unlisted: dict[str, str] = {}       # name -> the package module, not listed, it comes from
        self.attrs: set = set()                  # (definition, base name, attribute) it reads
        for node in ast.parse(self.source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self._import(node)
                continue
            names = _bound(node)
            if not names:
                continue
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            while first > 1 and self.lines[first - 2].lstrip().startswith("#"):
                first -= 1      # the comment right above a definition says why: it goes with it
            reads = _free_names(node)
            # module.attr reads, for a name bound to a listed module itself (examples.f)
            self.attrs.update({(bound, a.value.id, a.attr) for a in ast.walk(node) for bound in names
                               if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name)})
            local = []
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and (
                        self._source_of(sub) in listed
                        or any(f"{self._source_of(sub)}.{a.name}" in listed for a in sub.names)):
                    # a function's own import of (a name of) a listed module: listed globals
                    self._import(sub)
                    reads |= {a.asname or a.name for a in sub.names}
                    local.append((sub.lineno, sub.end_lineno))
            for bound in names:
                self.defs[bound] = (first, node.end_lineno or node.lineno, reads - {bound})
                self.dropped[bound] = local

    def _source_of(self, node) -> str:
        if not node.level:
            return node.module or ""
        base = self.package.split(".")[:len(self.package.split(".")) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def _import(self, node) -> None:
        if isinstance(node, ast.ImportFrom):
            source = self._source_of(node)
            if source == "__future__":
                return
            for a in node.names:
                bound = a.asname or a.name
                if f"{source}.{a.name}" in self.listed:      # a listed module itself
                    self.routed[bound] = (f"{source}.{a.name}", None)
                elif source in self.listed:
                    self.routed[bound] = (source, a.name)
                elif node.level:
                    self.unlisted[bound] = source
                else:
                    self.imports[bound] = (f"from {source} import {a.name}"
                                           + (f" as {a.asname}" if a.asname else ""))
            return
        for a in node.names:
            bound = (a.asname or a.name).split(".")[0]
            self.imports[bound] = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")

    def text(self, name: str) -> str:
        """The definition of ``name`` as written, less its imports of listed modules."""
        first, last, _ = self.defs[name]
        keep = [k for k in range(first, last + 1)
                if not any(a <= k <= b for a, b in self.dropped[name])]
        return "\n".join(self.lines[k - 1] for k in keep)

def _free_names(node) -> set:
    """The names a definition reads and does not bind itself (its locals, arguments,
    comprehension and loop variables are not the module's)."""
    loads: set[str] = set()
    binds: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else binds).add(n.id)
        elif isinstance(n, ast.arg):
            binds.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not node:
            binds.add(n.name)
        elif isinstance(n, ast.ExceptHandler) and n.name:
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
    """One Python file holding ``roots`` ({module: [names]}; a module is a module object, a
    dotted name, or the name of a module of pytest_dumpref.xla) and everything they reach,
    modules in ``order`` (the same keys), definitions in source order, each module's part
    headed by a comment naming its file.  A name bound to a listed module itself (``from
    pytest_dumpref import examples``) is bound to the listing's own module."""
    def load(m):
        if isinstance(m, types.ModuleType):
            return m
        return importlib.import_module(m if "." in m else f"{PACKAGE}.{m}")
    objs = {m: load(m) for m in order}
    dotted = {o.__name__: m for m, o in objs.items()}
    mods = {m: _Module(objs[m], set(dotted)) for m in order}
    keep: dict = {m: set() for m in order}
    todo = [(m, n) for m, names in roots.items() for n in names]
    imports: dict[str, str] = {}
    selves: set = set()
    while todo:
        m, name = todo.pop()
        mod = mods[m]
        if name in mod.routed:
            source, there = mod.routed[name]
            if there is None:
                selves.add(f"{name} = sys.modules[__name__]  # {source}: its definitions are listed here")
                imports.setdefault("import sys", m)
            else:
                todo.append((dotted[source], there))
            continue
        if name in mod.unlisted:
            raise ListingError(f"{mod.name}: {name!r} is reached but comes from {mod.unlisted[name]}, "
                               f"which the listing does not hold")
        if name in mod.imports:
            imports.setdefault(mod.imports[name], m)
            continue
        if name not in mod.defs:
            if hasattr(builtins, name):
                continue
            raise ListingError(f"{mod.name}: {name!r} is read but defined nowhere at its top level")
        if name in keep[m]:
            continue
        keep[m].add(name)
        todo.extend((m, r) for r in mod.defs[name][2])
        todo.extend((dotted[mod.routed[base][0]], attr) for d, base, attr in mod.attrs
                    if d == name and base in mod.routed and mod.routed[base][1] is None)
    placed: dict = {}
    for m in order:
        for name in keep[m]:
            if name in placed and mods[placed[name]].text(name) != mods[m].text(name):
                raise ListingError(f"{name!r} is defined differently in {mods[placed[name]].name} and "
                                   f"{mods[m].name}: the one-file listing cannot hold both")
            placed.setdefault(name, m)
    parts = [header.rstrip("\n"), "from __future__ import annotations", ""]
    parts += sorted(imports, key=lambda s: (s.startswith("from"), s))
    # before the definitions: a module-level statement may read a listed module's name
    # (fusion_programs.WRITTEN_AFTER reads examples.kv_cache_update as it is built)
    if selves:
        parts += [""] + sorted(selves)
    for m in order:
        mod = mods[m]
        spans = sorted({mod.defs[n][:2] for n in keep[m] if placed.get(n) == m})
        if not spans:
            continue
        parts += ["", "", f"# ---- from {mod.name} " + "-" * max(0, 80 - len(mod.name))]
        # a definition binding several names (a, b = ...) is listed once
        names_at = {mod.defs[n][:2]: n for n in keep[m]}
        for span in spans:
            parts += ["", mod.text(names_at[span])]
    return "\n".join(parts).strip("\n") + "\n"
