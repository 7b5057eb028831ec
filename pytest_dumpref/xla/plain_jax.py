"""What a reader runs with plain jax, and how the claims run it as the reader would.

The pass study's recipe: its program saved as block.py, the every-pass dump made by
``RECIPE`` (XLA_FLAGS and ``python -c``, nothing of this package imported), and XLA's cost
analysis of every file of that dump (``passes.XLA_COST_LISTING`` saved as xla_cost.py, run
by ``COST_COMMAND``).  Nothing here imports pytest.
"""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

from .dump import Dump, shown_name
from .passes import XLA_COST_LISTING

# The pass study's program: x f32[B, S, D] through transformer_block(x, params, n_heads=H)
# with MLP width F; inputs from numpy's default_rng, so that no device is touched to make them.
B, S, D, H, F = 4, 128, 256, 4, 1024
X_SEED, PARAMS_SEED = 1, 0
PROGRAM_IMPORTS = "import math\n\nimport jax\nimport jax.numpy as jnp\nimport numpy as np\n"
RECIPE_DUMP = "block-dump"
RECIPE_CODE = f"""
import functools, jax, numpy as np
from block import transformer_block, transformer_params
cpu = jax.devices("cpu")[0]
x = jax.device_put(np.random.default_rng({X_SEED}).standard_normal(({B}, {S}, {D})).astype(np.float32), cpu)
params = jax.device_put(transformer_params({D}, {F}, seed={PARAMS_SEED}), cpu)
jax.jit(functools.partial(transformer_block, n_heads={H}))(x, params).block_until_ready()
"""
# The same every-pass dump with plain jax and XLA_FLAGS, nothing of this tool but the program
# (saved as block.py); the first claim of the pass study runs this exact command.
RECIPE = f"XLA_FLAGS=\"--xla_dump_to={RECIPE_DUMP} --xla_dump_hlo_pass_re=.*\" python -c '{RECIPE_CODE}'"
# XLA's cost analysis of every HLO file of the recipe's dump, with the listing saved as
# xla_cost.py beside block.py.
COST_COMMAND = f"python xla_cost.py {RECIPE_DUMP}/*.txt"


def plain_env() -> dict:
    """A reader's plain-jax process: no XLA_FLAGS or PYTHONPATH of ours, this project's PJRT
    plugin not loaded (loaded or not, a dump is the same: the CPU device is named; not loading
    it spares a build in a fresh checkout), "python" the interpreter running the claims."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    env["DUMPREF_PJRT"] = "0"
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def block_program():
    """The functions the pass study's compile traces, from pytest_dumpref/examples.py."""
    from pytest_dumpref import examples
    return (examples.transformer_block, examples.causal_attention, examples.layernorm,
            examples.mlp, examples.gelu, examples.softmax, examples.transformer_params)


def block_source() -> str:
    """block.py: the program, read with inspect.getsource so that it cannot drift from what was
    compiled; with PROGRAM_IMPORTS it is a runnable module."""
    return PROGRAM_IMPORTS + "\n\n" + "\n\n".join(inspect.getsource(f) for f in block_program())


def block_inputs() -> tuple:
    """(x, params) of the pass study, committed to the CPU device (XLA's CPU compiler, even if
    a plugin device is the default), as RECIPE_CODE makes them."""
    import jax
    import numpy as np

    from pytest_dumpref.examples import transformer_params
    cpu = jax.devices("cpu")[0]
    x = jax.device_put(np.random.default_rng(X_SEED).standard_normal((B, S, D)).astype(np.float32), cpu)
    return x, jax.device_put(transformer_params(D, F, seed=PARAMS_SEED), cpu)


def run(command: str, folder: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """``command`` in bash in ``folder``, in a reader's plain-jax environment."""
    return subprocess.run(["bash", "-c", command], cwd=folder, env=plain_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)


def run_recipe(folder: Path) -> Dump:
    """Save the program as block.py in ``folder`` and run RECIPE there, as a reader would."""
    (folder / "block.py").write_text(block_source())
    done = run(RECIPE, folder)
    if done.returncode != 0:
        raise RuntimeError(f"the plain-jax recipe failed in {folder}:\n{done.stderr[-3000:]}")
    return Dump.from_folder(folder / RECIPE_DUMP)


def run_cost_listing(folder: Path) -> dict:
    """Save XLA_COST_LISTING as xla_cost.py in the recipe's ``folder`` and run COST_COMMAND
    there: file name (module_NNNN shown) -> (bytes accessed, flops), as it prints them."""
    (folder / "xla_cost.py").write_text(XLA_COST_LISTING)
    done = run(COST_COMMAND, folder)
    if done.returncode != 0:
        raise RuntimeError(f"{COST_COMMAND} failed in {folder}:\n{done.stderr[-3000:]}")
    listed = {}
    for line in done.stdout.splitlines():
        nbytes, flops, path = line.split(" ", 2)
        listed[shown_name(Path(path))] = (int(nbytes), int(flops))
    return listed
