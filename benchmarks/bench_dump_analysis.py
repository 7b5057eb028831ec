"""How fast is the analysis of a full every-pass dump?

Program: ``examples.block_stack`` forward and backward (``jax.grad`` of the sum of its
output, with respect to the input and every layer's parameters), d_model 64, 4 heads,
d_ff 256, x: f32[2, 32, 64], at 1, 4 and 16 layers.  For each size, measured in one run:

- the compile with an every-pass dump (``xla_dump_hlo_pass_re=.*``): the time a user pays
  anyway to get the dump;
- XLA's own C++ parser (``hlo_module_from_text``) reading every snapshot of the dump;
- the full analysis (``passes.pass_changes``: parse every snapshot, diff consecutive ones,
  traffic of each distinct state), starting from an empty line cache.

Goals (issue 3): analysis within 2x of XLA's parser alone, under a quarter of the compile,
and linear in dump size (time per MB roughly constant across sizes).  The ratios go to
``benchmark.extra_info``.  Run: ``pytest benchmarks/bench_dump_analysis.py --benchmark-only``.
A smoke run (``--benchmark-disable``) skips the 16-layer size.
"""
from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from pytest_dumpref.examples import block_stack, transformer_params
from pytest_dumpref.xla import hlo
from pytest_dumpref.xla.dump import DumpSession
from pytest_dumpref.xla.passes import pass_changes
from pytest_dumpref.xla.xla_private import parse_with_xla

D_MODEL, D_FF, HEADS = 64, 256, 4


def forward_backward(x, layers):
    return jax.grad(lambda x, layers: jnp.sum(block_stack(x, layers, HEADS)), argnums=(0, 1))(x, layers)


def _dump(tmp_path: Path, n_layers: int):
    layers = [transformer_params(D_MODEL, D_FF, seed=i) for i in range(n_layers)]
    x = jnp.linspace(-1, 1, 2 * 32 * D_MODEL, dtype=jnp.float32).reshape(2, 32, D_MODEL)
    t0 = time.perf_counter()
    d = DumpSession(tmp_path).dump(forward_backward, x, layers)
    return d, time.perf_counter() - t0


def _files(d):
    return [d.files.before_optimizations, *(s.path for s in d.snapshots), d.files.optimized]


@pytest.mark.parametrize("n_layers", [1, 4, 16])
def test_analysis_of_an_every_pass_dump(benchmark, tmp_path, n_layers):
    if benchmark.disabled and n_layers == 16:
        # a smoke run (--benchmark-disable) only checks that the benchmark works; the
        # 16-layer compile alone takes 20 s or more
        pytest.skip("the 16-layer dump is only made when benchmarks are measured")
    d, compile_s = _dump(tmp_path, n_layers)
    paths = _files(d)
    texts = [p.read_text() for p in paths]
    mb = sum(len(t) for t in texts) / 1e6

    t0 = time.perf_counter()
    for t in texts:
        parse_with_xla(t)
    xla_parse_s = time.perf_counter() - t0

    def from_empty_caches():
        hlo.clear_cache()
        for s in d.snapshots:
            s.drop_cache()

    timed = []

    def analyse():
        t0 = time.perf_counter()
        out = pass_changes(d)
        timed.append(time.perf_counter() - t0)
        return out

    # one round: a second one would find the parser's line cache warm.  Timed here as well
    # as by pytest-benchmark, so that the ratios exist under --benchmark-disable too.
    changes = benchmark.pedantic(analyse, setup=from_empty_caches, rounds=1, iterations=1,
                                 warmup_rounds=0)
    analysis_s = timed[-1]
    assert changes, "an every-pass dump of a training step has passes that changed it"
    benchmark.extra_info.update({
        "layers": n_layers, "snapshots": len(d.snapshots), "dump_mb": round(mb, 3),
        "compile_with_dump_s": round(compile_s, 3), "xla_parser_s": round(xla_parse_s, 3),
        "analysis_s": round(analysis_s, 3),
        "analysis_s_per_mb": round(analysis_s / mb, 4),
        "ratio_to_xla_parser": round(analysis_s / xla_parse_s, 3),
        "ratio_to_compile": round(analysis_s / compile_s, 3),
        "goal_within_2x_of_xla_parser": analysis_s <= 2 * xla_parse_s,
        "goal_under_quarter_of_compile": analysis_s < compile_s / 4,
        "passes_that_changed": len(changes),
    })
