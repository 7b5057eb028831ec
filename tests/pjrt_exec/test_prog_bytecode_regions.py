"""The bytecode reader on ops whose regions are isolated from above and are two or more:
MLIR writes all the regions of such an op in one nested IR section, and the reader once read a
section per region, refusing valid programs as "malformed bytecode: trailing region bytes"
(issue 20: the gradient of a max-pool under vmap, jax's testMinMaxPool; select_and_scatter
carries a select and a scatter region)."""
from __future__ import annotations

import subprocess
import sys

import pytest

import prog_artifacts as pa

LOWER = r'''
import sys
import jax, jax.numpy as jnp, numpy as np
from jax import lax
from jaxlib.mlir.dialects import stablehlo
def pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 1, 1, 1), "VALID")
f = jax.jit(jax.vmap(jax.grad(lambda x: pool(x).sum())))
text = f.lower(np.zeros((1, 2, 4, 4, 3), np.float32)).as_text()
assert "select_and_scatter" in text
sys.stdout.buffer.write(stablehlo.serialize_portable_artifact_str(text, "1.0.0"))
'''


@pytest.fixture(scope="module")
def artifact():
    done = subprocess.run([sys.executable, "-c", LOWER], capture_output=True, timeout=300,
                          env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_two_isolated_regions_are_read_from_one_section(artifact, tmp_path):
    reader = pa.Reader(pa.build_prog_library(tmp_path))
    p, code, message = reader.parse(artifact)
    # The whole container is read: what is left is the interpreter's own limit (no
    # select_and_scatter kernel yet), never a malformed-bytecode refusal.
    assert "trailing region bytes" not in message and code != pa.INVALID_ARGUMENT, message
    if p is None:
        assert code == pa.UNIMPLEMENTED and "select_and_scatter" in message, message
    else:
        reader.free(p)
