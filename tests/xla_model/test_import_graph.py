"""No import circles in pytest_dumpref: a room stands above the rooms it uses.

Every import statement of every module counts, those inside functions too (an import inside a
function is how a circle hides), read with ast, not by importing anything.  The test fails on
any circle.

    python -m pytest tests/xla_model/test_import_graph.py -q     # the check
    python tests/xla_model/test_import_graph.py                  # prints the circles found
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, also when run as a script
from graph_circles import circles  # noqa: E402

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_dumpref"


def module_names(package: Path = PACKAGE) -> dict:
    """Dotted module name -> its file, for every .py file of the package."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph(package: Path = PACKAGE) -> dict:
    """Module -> the modules of the package it imports (anywhere in its text)."""
    modules = module_names(package)
    graph: dict[str, set] = {m: set() for m in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here.split(".")[:len(here.split(".")) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                # "from . import x": the module x when there is one, else the package itself
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source
                           for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def test_the_package_has_no_import_circle():
    assert circles(import_graph()) == []


def test_a_circle_is_found_where_it_hides_inside_a_function(tmp_path):
    pkg = tmp_path / "pytest_dumpref"
    (pkg / "xla").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "xla" / "__init__.py").write_text("")
    (pkg / "xla" / "low.py").write_text("def f():\n    from .high import g\n    return g\n")
    (pkg / "xla" / "high.py").write_text("from . import low\n\ndef g():\n    return low\n")
    (pkg / "xla" / "apart.py").write_text("from .low import f\n")
    assert circles(import_graph(pkg)) == [["pytest_dumpref.xla.high", "pytest_dumpref.xla.low"]]


if __name__ == "__main__":
    for c in circles(import_graph()):
        print(" <-> ".join(c))
