"""The core needs no compiler: in a process where ``import jax`` fails, pytest-dumpref renders a
write-up of claims that record their evidence by hand and checks it, and the compiler's
fixtures are what fail, by name, when a claim uses one."""
from __future__ import annotations

import os
import subprocess
import sys

# installed as sitecustomize: every import of jax or jaxlib fails, as where neither is installed
NO_JAX = '''
import sys

class NoJax:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("jax", "jaxlib"):
            raise ImportError(f"no {name} here (tests/core/test_core_without_jax.py)")
        return None

sys.meta_path.insert(0, NoJax())
'''

PYPROJECT = '''
[tool.dumpref]
title = "Arithmetic"
sections = ["sums"]
section_word = "part"
'''

CLAIMS = '''
import sys
import pytest

@pytest.mark.sums
@pytest.mark.claim("Two and two make four.", finding="the sum is {sum}")
@pytest.mark.provenance(dtype="int", shapes={"x": (2,)}, method="addition")
def test_sum(evidence):
    evidence.number("sum", 2 + 2)
    evidence.table("terms", [{"a": 2, "b": 2}])
    evidence.note("No compiler was asked.")
    with pytest.raises(ImportError):
        import jax  # noqa: F401
    assert 2 + 2 == 4

@pytest.mark.sums
@pytest.mark.claim("Three and three make six.")
@pytest.mark.provenance(dtype="int", shapes={"x": (2,)}, method="addition")
def test_other(evidence):
    evidence.number("sum", 3 + 3)
    assert "jax" not in sys.modules and "pytest_dumpref.xla" not in sys.modules
'''


def _run(path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DUMPREF_", "XLA_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(path / "site"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
                          cwd=path, env=env, capture_output=True, text=True, timeout=300)


def test_the_core_renders_and_checks_a_write_up_where_jax_cannot_be_imported(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(NO_JAX)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "test_sums.py").write_text(CLAIMS)
    probe = _run(tmp_path, "--version")
    assert probe.returncode == 0, probe.stderr
    blocked = subprocess.run([sys.executable, "-c", "import jax"], env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
                             capture_output=True, text=True)
    assert "ImportError: no jax here" in blocked.stderr, blocked.stderr    # the block works

    res = _run(tmp_path, "--dumpref-report=writeup.md")
    assert res.returncode == 0, res.stdout + res.stderr
    md = (tmp_path / "writeup.md").read_text()
    assert "2 claims established, 0 not established" in md
    assert "| provenance | of every claim in this part |" in md          # [tool.dumpref] section_word
    assert "| python | " in md and "| caches | " in md
    assert "| jax |" not in md and "jax / jaxlib" not in md and "XLA_FLAGS" not in md
    assert "(dump folders)" not in md

    check = _run(tmp_path, "--dumpref-check=writeup.md")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "every line of writeup.md reproduces (2 claims ran)" in check.stdout

    (tmp_path / "writeup.md").write_text(md.replace("| sum | 4 | exact |", "| sum | 5 | exact |"))
    check = _run(tmp_path, "--dumpref-check=writeup.md")
    assert check.returncode == 1 and "the file says '| sum | 5 | exact |'" in check.stdout, check.stdout


def test_a_compiler_fixture_without_jax_fails_its_claim_naming_jax(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(NO_JAX)
    (tmp_path / "test_dump.py").write_text('''
import pytest

@pytest.mark.claim("It compiles.")
@pytest.mark.provenance(dtype="f32", shapes={"x": (2,)}, method="dump")
def test_dump(dump):
    assert dump(abs, 1.0)
''')
    res = _run(tmp_path)
    assert res.returncode == 1
    assert "ImportError: no jax here" in res.stdout, res.stdout
