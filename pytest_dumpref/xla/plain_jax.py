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

from .dump import MANIFEST, Dump, manifest_entries, manifest_listing, shown_name
from .passes import XLA_COST_LISTING
from .xla_private import cost_analysis

# The pass study's program: x f32[B, S, D] through transformer_block(x, params, n_heads=H)
# with MLP width F; inputs from numpy's default_rng, so that no device is touched to make them.
B, S, D, H, F = 4, 128, 256, 4, 1024
HD = D // H  # head size
X_SEED, PARAMS_SEED = 1, 0
# Every parameter of the program, as the dump names them (the core checks each against the
# compiled program's parameters).
PROVENANCE = dict(dtype="f32", shapes={
    "x": (B, S, D),
    "params['ln1_g']": (D,), "params['ln1_b']": (D,),
    "params['wq']": (D, D), "params['wk']": (D, D), "params['wv']": (D, D), "params['wo']": (D, D),
    "params['ln2_g']": (D,), "params['ln2_b']": (D,),
    "params['w1']": (D, F), "params['b1']": (F,), "params['w2']": (F, D), "params['b2']": (D,)})
# One method for the whole study (the write-up states it once): every claim reads the same dump.
METHOD = (f"XLA every-pass dump (xla_dump_hlo_pass_re=.*) of the forward pass "
          f"transformer_block(x, params, n_heads={H}) on the CPU backend; spill-style byte "
          f"accounting checked against XLA's HloCostAnalysis; buffers from the dump's buffer "
          f"assignment of the optimized module (cpu_after_optimizations-buffer-assignment.txt)")
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


def record_matmul_flops(evidence) -> int:
    """Record the flops of the program's matmuls, from its shapes, with the sum that gives
    them: the q, k, v and o projections, the attention's scores and p @ v, the two MLP
    matmuls (2 flops a multiply-add).  Returns them."""
    flops = 4 * 2 * B * S * D * D + 2 * (2 * B * H * S * S * HD) + 2 * (2 * B * S * D * F)
    evidence.number("matmul flops from the shapes", flops)
    evidence.note(f"matmul flops = 4 projections x 2*{B}*{S}*{D}*{D} + 2 attention products x "
                  f"2*{B}*{H}*{S}*{S}*{HD} + 2 MLP matmuls x 2*{B}*{S}*{D}*{F}")
    return flops


def record_recipe(evidence, dump: Dump, folder: Path) -> tuple[dict, dict]:
    """Run the plain-jax recipe in ``folder`` as a reader would and record it beside the
    tool's ``dump``: block.py, the recipe, how the manifest is written, the snapshots the
    recipe wrote and how many of its files are the tool's.  Returns the two manifests (file
    name -> hash), the tool's and the recipe's."""
    evidence.excerpt("block.py, the program compiled: x f32[4,128,256] -> transformer_block(x, params, "
                     "n_heads=4), the functions it calls, and the maker of its parameters "
                     "(pytest_dumpref/examples.py, read with inspect.getsource by this claim)",
                     block_source(), lang="python", fold=True)
    recipe = run_recipe(folder)
    ours = manifest_entries(dump.folder / MANIFEST)
    theirs = manifest_entries(recipe.write_manifest())
    evidence.excerpt("the same every-pass dump with plain jax: save the listing headed block.py above "
                     "as block.py, then run (this claim runs exactly this, in a fresh folder)", RECIPE, lang="bash")
    evidence.excerpt("how dumpref-manifest.txt is written (pytest_dumpref/xla/dump.py, as it ran)",
                     manifest_listing(), lang="python", fold=True)
    evidence.number("pass snapshots the plain-jax recipe wrote", len(recipe.snapshots))
    evidence.number("dump files of the recipe identical to the tool's (sha256 without metadata "
                    "and source locations)", sum(theirs.get(k) == v for k, v in ours.items()))
    evidence.note(
        f"The recipe's {len(ours)} text files are this claim's, name for name (module_NNNN aside) and, once metadata and "
        "source locations are removed, byte for byte. Without the two device_put calls the passes are "
        "the same but the parameters lack sharding={replicated} (jit annotates only arrays committed "
        "to a device; the claims commit theirs to the CPU device so that XLA's CPU compiler runs "
        "whatever backend is the default).")
    return ours, theirs


def record_cost_listing(evidence, dump: Dump, folder: Path, recorded: dict) -> tuple[dict, dict]:
    """Run XLA_COST_LISTING, as shown, on the recipe's dump in ``folder`` in a plain-jax
    subprocess, and record it, the command and what it printed.  Returns (listed, expected):
    file name -> (bytes accessed, flops) as the listing printed them, and as
    xla_private.cost_analysis gives them for the tool's own file of that name (from
    ``recorded``, path -> cost, where a claim already has it)."""
    evidence.excerpt("XLA's cost analysis of any dump file with plain jax: save as xla_cost.py "
                     "beside block.py (jax's public Compiled.cost_analysis() only reaches the "
                     "traced and optimized ends)", XLA_COST_LISTING, lang="python", fold=True)
    evidence.excerpt("then run (this claim runs exactly this in the recipe's folder)",
                     COST_COMMAND, lang="bash")
    listed = run_cost_listing(folder)
    expected = {}
    files = [dump.files.before_optimizations, *(s.path for s in dump.snapshots), dump.files.optimized]
    for path in (p for p in files if p is not None):  # a file the dump lacks: listed, not expected
        cost = recorded.get(path) or cost_analysis(path.read_text(), source=str(path))
        expected[shown_name(path)] = (round(cost["bytes accessed"]), round(cost["flops"]))
    evidence.number("HLO files of the recipe's dump the listing analysed, each equal to the "
                    "tool's XLA figures", len(listed))
    evidence.table("XLA's cost analysis of every HLO file of the dump, as the listing prints it", [
        {"file": name, "bytes accessed": listed[name][0], "flops": listed[name][1]}
        for name in sorted(listed)], fold=True)
    return listed, expected
