"""jax writes the whole Python stack into a program's source locations (the StackFrames table,
and ``stack_frame_id=`` in each instruction's metadata), so the frames above a claim (pytest's
runner serially; xdist's and execnet's under ``-n``) used to move the ids: an excerpt of
optimized HLO rendered ``stack_frame_id=42`` under ``pytest -n 2`` where a serial run rendered
37.  The dump fixture leaves the frames above its caller out, as jax leaves out its own."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pytest_dumpref.xla.dump import DumpSession


def _program(x):
    import jax.numpy as jnp
    return jnp.tanh(x) * 2 + 1


# frames of another file between the test and the code that asks for the dump, as a test
# runner's frames stand above a claim: one of them, or thirteen
_RUNNER = "def nest(n, f):\n    return f() if n == 0 else nest(n - 1, f)\n"


def test_the_stack_above_the_caller_does_not_reach_the_dump(tmp_path):
    x = np.ones((8, 8), np.float32)
    ns: dict = {}
    exec(compile(_RUNNER, str(tmp_path / "a_runner.py"), "exec"), ns)

    def via(n, folder):      # the same call sites for both, only the frames between differ
        return ns["nest"](n, lambda: DumpSession(tmp_path / folder).dump(_program, x))

    shallow, deep = [via(n, folder) for n, folder in ((0, "a"), (12, "b"))]
    assert "stack_frame_id=" in shallow.optimized_text     # the ids are there to compare
    assert deep.optimized_text == shallow.optimized_text
    # the caller's own frame is kept: the locations still name this file, not the runner's
    assert __file__ in shallow.optimized_text and "a_runner.py" not in shallow.optimized_text


CLAIM = textwrap.dedent('''
    import numpy as np, pytest, jax.numpy as jnp

    def scale_add(x):
        return jnp.exp(x) * 2 + 1

    @pytest.mark.claim("exp, scale and add fuse into one kernel")
    @pytest.mark.provenance(dtype="f32", shapes={"x": (8, 8)}, method="the optimized HLO")
    def test_one_kernel(dump, evidence):
        d = dump(scale_add, np.ones((8, 8), np.float32))
        evidence.excerpt("optimized entry", "\\n".join(i.line for i in d.optimized.entry.instructions))
        assert sum(i.opcode == "fusion" for i in d.optimized.entry.instructions) == 1

    @pytest.mark.claim("tanh fuses with the add")
    @pytest.mark.provenance(dtype="f32", shapes={"x": (8, 8)}, method="the optimized HLO")
    def test_tanh(dump, evidence):
        d = dump(lambda x: jnp.tanh(x) + 3, np.ones((8, 8), np.float32))
        evidence.excerpt("optimized entry", "\\n".join(i.line for i in d.optimized.entry.instructions))
        assert d.traffic > 0
''')


def test_an_excerpt_renders_the_same_under_xdist_and_serially(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "pyproject.toml").write_text('[tool.dumpref]\ntitle = "Frames"\n')
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "test_frames.py").write_text(CLAIM)

    def render(name, *extra):
        r = subprocess.run([sys.executable, "-m", "pytest", "claims", "-q", "-p", "no:cacheprovider",
                            f"--dumpref-report={name}", *extra], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        # the Markdown names its data file (<name without .md>.dumpref.json) too
        return (tmp_path / name).read_text().replace(name.removesuffix(".md"), "WRITEUP")

    serial, parallel = render("serial.md"), render("parallel.md", "-n", "2")
    assert "stack_frame_id=" in serial
    assert parallel == serial
