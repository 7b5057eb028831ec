"""The programs of the fusion study's across-programs claims, with their inputs.

Pieces of models, each at a size where fusion effects are measurable and allocation does not
dominate (arrays around f32[1024,1024], 4 MiB).  Arguments are (dtype, shape), filled by
pytest_dumpref.timing.fill (standard normal; integers uniform in [0, 1000)) from numpy's
default_rng(0), the same in the dumps and in the timed subprocess.

``programs_listing`` cuts programs.py from this file, examples.py and timing.py: the
programs with their inputs, which a reader runs with plain jax beside the fusion model's
listing (``PROGRAMS_COMMANDS``).  Nothing here imports pytest.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

from pytest_dumpref import examples

F32, M = "float32", (1024, 1024)
SUITE = {
    "softmax": [(F32, M)],
    "layernorm": [(F32, M), (F32, (1024,)), (F32, (1024,))],
    "rmsnorm": [(F32, M), (F32, (1024,))],
    "residual_layernorm": [(F32, M), (F32, M), (F32, (1024,)), (F32, (1024,)), (F32, (1024,))],
    "gelu": [(F32, M)],
    "swiglu": [(F32, (1024, 256)), (F32, (256, 1024)), (F32, (256, 1024))],
    "mlp": [(F32, (1024, 256)), (F32, (256, 1024)), (F32, (1024,)), (F32, (1024, 256)), (F32, (256,))],
    "attention_scores": [(F32, (1024, 64)), (F32, (1024, 64))],
    "cross_entropy": [(F32, M), ("int32", (1024,))],
    "huber_loss": [(F32, M), (F32, M)],
    "adam_update": [(F32, M)] * 4,
    "sgd_momentum": [(F32, M)] * 3,
    "gelu_grad": [(F32, M)],
    "layernorm_grad": [(F32, M), (F32, (1024,)), (F32, (1024,))],
    "conv_bias_relu": [(F32, (8, 64, 64, 32)), (F32, (3, 3, 32, 32)), (F32, (32,))],
    "rope": [(F32, M)],
}
# Programs of pytest_dumpref.examples written before the model and not looked at while it
# was built: the model is tried on them as they are.
HELD_OUT = {
    "transformer_block": lambda: (_arrays([(F32, (1, 256, 256))])[0], _cpu(examples.transformer_params(256, 1024)), 4),
    "causal_attention": lambda: (*_arrays([(F32, (1, 512, 256))] + [(F32, (256, 256))] * 4), 4),
    "sgd_step": lambda: (_cpu({k: v for k, v in examples.transformer_params(256, 1024).items()
                               if k in ("w1", "b1", "w2", "b2")}),
                         *_arrays([(F32, (1024, 256)), (F32, (1024, 256))])),
    "scan_rnn": lambda: tuple(_arrays([(F32, (64, 256)), (F32, (16, 64, 256)), (F32, (256, 256))])),
}
# Programs written after the model was finished, to try it on shapes of decision the
# programs above lack (pytest_dumpref.examples says which): name -> (function, argument spec,
# static arguments).
WRITTEN_AFTER = {
    "kv_cache_update": (examples.kv_cache_update, [(F32, M), (F32, (16, 1024))], (3,)),
    "concat_heads": (examples.concat_heads, [(F32, (1024, 256))] * 4, ()),
    "concat_rows": (examples.concat_rows, [(F32, (512, 1024))] * 2, ()),
    "log_softmax": (examples.log_softmax, [(F32, M)], ()),
    "silu_grad": (examples.silu_grad, [(F32, M)], ()),
    "batchnorm": (examples.batchnorm, [(F32, M)], ()),
    "transpose_add": (examples.transpose_add, [(F32, M)] * 2, ()),
    "pad_tanh": (examples.pad_tanh, [(F32, M)], ()),
    "halves": (examples.halves, [(F32, M)], ()),
    "matvec_tanh": (examples.matvec_tanh, [(F32, M), (F32, (1024,)), (F32, (1024,))], ()),
    "top_k": (examples.top_k, [(F32, M)], ()),
    "bf16_dense_gelu": (examples.bf16_dense_gelu, [(F32, (1024, 256)), (F32, (256, 1024))], ()),
    "masked_row_sum": (examples.masked_row_sum, [(F32, M)] * 2, ()),
    "cumsum_exp": (examples.cumsum_exp, [(F32, (256, 1024))], ()),
}
# Every program above as pytest_dumpref.timing times it: name -> (function of
# pytest_dumpref.examples taking arrays alone, the arrays' spec).  The held-out programs'
# static arguments and parameter dicts are closed over by the examples' functions of arrays;
# kv_cache_update's position is its default, 3, as WRITTEN_AFTER passes it.
_SGD = [(F32, (256, 1024)), (F32, (1024,)), (F32, (1024, 256)), (F32, (256,)), (F32, (1024, 256)), (F32, (1024, 256))]
TIMED: dict[str, tuple] = {
    **{name: (name, spec) for name, spec in SUITE.items()},
    "transformer_block": ("transformer_block_4_heads",
                          [(F32, (1, 256, 256))] + [(F32, v.shape) for v in (
                              examples.transformer_params(256, 1024)[k] for k in examples.TRANSFORMER_PARAMS)]),
    "causal_attention": ("causal_attention_4_heads", [(F32, (1, 512, 256))] + [(F32, (256, 256))] * 4),
    "sgd_step": ("sgd_step_of_arrays", _SGD),
    "scan_rnn": ("scan_rnn", [(F32, (64, 256)), (F32, (16, 64, 256)), (F32, (256, 256))]),
    **{name: (fn.__name__, spec) for name, (fn, spec, _) in WRITTEN_AFTER.items()},
}


def dump_commands(names) -> str:
    """Shell lines that dump the optimized modules of the TIMED programs ``names`` with plain
    jax and the timing claim's program.py (timing.program_listing): each program fused into
    dump/<name>/fused, without the fusion pass into dump/<name>/unfused."""
    lines = []
    for name in names:
        function, spec = TIMED[name]
        args = ", ".join(f"np.zeros({tuple(shape)!r}, {dtype!r})" for dtype, shape in spec)
        for variant, flag in (("fused", ""), ("unfused", " --xla_disable_hlo_passes=fusion")):
            lines.append(f'XLA_FLAGS="--xla_dump_to=dump/{name}/{variant}{flag}" JAX_PLATFORMS=cpu python -c '
                         f'"import jax, numpy as np, program; jax.jit(program.{function}).lower({args}).compile()"')
    return "\n".join(lines)


def _cpu(tree):
    """Arrays committed to jax's CPU device, so that every compile targets XLA's CPU compiler
    even when a plugin device (this project's own) claims the default."""
    return jax.tree_util.tree_map(lambda a: jax.device_put(a, jax.devices("cpu")[0]), tree)


def _arrays(spec):
    from pytest_dumpref.timing import fill
    rng = np.random.default_rng(0)
    return [_cpu(fill(rng, dtype, shape)) for dtype, shape in spec]


def arrays(spec) -> list:
    """The arrays of a (dtype, shape) spec, filled from a fresh default_rng(0), on the CPU."""
    return _arrays(spec)


def programs() -> dict:
    """name -> (function, arguments) of every program of the decisions claim, as it compiles
    them: each program's arrays from a fresh numpy default_rng(0) (_arrays), in the order of its
    spec, then its static arguments.  A Python int among the arguments (n_heads=4 of two
    held-out programs, pos=3 of kv_cache_update) is static: the compile closes over it and
    does not trace it, as pytest_dumpref.xla.dump does with any int, bool, str or None (traced,
    kv_cache_update's pos makes the slice dynamic, and the pass logs 11 decisions, not 10)."""
    out = {name: (getattr(examples, name), _arrays(spec)) for name, spec in SUITE.items()}
    out |= {name: (getattr(examples, name), list(make())) for name, make in HELD_OUT.items()}
    out |= {name: (fn, _arrays(spec) + list(static)) for name, (fn, spec, static) in WRITTEN_AFTER.items()}
    return out


def compile_programs() -> None:
    """programs.py's main: jit every program once, its static arguments closed over and its
    module named jit_<name>, so that the dump folder XLA_FLAGS names holds all of them."""
    for name, (fn, args) in programs().items():
        static = {i: a for i, a in enumerate(args) if isinstance(a, (int, bool, str, type(None)))}
        jitted = jax.jit(_closing_over(fn, len(args), static, name))
        jax.block_until_ready(jitted(*(a for i, a in enumerate(args) if i not in static)))


def _closing_over(fn, n: int, static: dict, name: str):
    """fn of n arguments as a function of the others, ``static`` (position -> value) closed over."""
    def traced(*xs):
        it = iter(xs)
        return fn(*(static[i] if i in static else next(it) for i in range(n)))
    traced.__name__ = name
    return traced


PROGRAMS_HEADER = '''"""programs.py: the programs of the decisions claim with their inputs (pytest_dumpref/examples.py
and pytest_dumpref/xla/cpu/fusion_programs.py, as they ran).  Beside fusion_model.py, with plain jax:

    XLA_FLAGS="--xla_dump_to=dump --xla_dump_hlo_pass_re=.* --xla_dump_fusion_visualization" \\
        JAX_PLATFORMS=cpu python programs.py
    python fusion_model.py dump       # its last line: the claim's total
"""
'''


# What a reader runs with the two listings of the decisions claim saved side by side; the claim
# runs exactly this.  The fusion log comes from xla_dump_fusion_visualization, the snapshot
# the pass saw from xla_dump_hlo_pass_re=.*; a Python int argument is static (programs()).
PROGRAMS_COMMANDS = ('XLA_FLAGS="--xla_dump_to=dump --xla_dump_hlo_pass_re=.* '
                     '--xla_dump_fusion_visualization" JAX_PLATFORMS=cpu python programs.py\n'
                     'python fusion_model.py dump')


def programs_listing() -> str:
    """programs.py: compile_programs and all it reaches (the programs, their inputs, fill), from
    examples.py, timing.py and this file, as they ran."""
    import sys

    from pytest_dumpref import timing
    from pytest_dumpref.xla.standalone import listing
    me = sys.modules[__name__]
    return (listing({examples: list(SUITE) + list(HELD_OUT), me: ["compile_programs"]},
                    order=(examples, timing, me), header=PROGRAMS_HEADER)
            + '\n\nif __name__ == "__main__":\n    compile_programs()\n')


def run_from_the_page(folder: Path) -> subprocess.CompletedProcess:
    """Save fusion_model.py and programs.py in ``folder`` and run PROGRAMS_COMMANDS there with
    plain jax, nothing of this package imported; its last line printed is the total."""
    from .fusion import model_listing
    from ..plain_jax import plain_env
    (folder / "fusion_model.py").write_text(model_listing())
    (folder / "programs.py").write_text(programs_listing())
    return subprocess.run(["bash", "-c", PROGRAMS_COMMANDS], cwd=folder, env=plain_env(),
                          capture_output=True, text=True, timeout=1200, check=False)


@dataclass
class PolicyAcrossPrograms:
    """The fusion pass of every program above against the model (policy_across_programs)."""
    per_program: list   # a row per SUITE program: decisions logged and predicted, extra bytes
    held: list          # a row per held-out or written-after program: decisions only
    modules: dict       # program -> ModuleFusion
    knockouts: dict     # rule of fusion_policy.RULES -> decisions mispredicted over SUITE without it

    @property
    def logged(self) -> int:
        """Decisions the pass logged, all programs."""
        return sum(r["decisions logged"] for r in self.per_program + self.held)

    @property
    def agreed(self) -> int:
        """Decisions the model predicts exactly, all programs."""
        return sum(r["predicted"] for r in self.per_program + self.held)

    @property
    def misses(self) -> list[dict]:
        """Every decision the model mispredicts, with its program and the rule that made it."""
        return [dict(program=n, **{k: r[k] for k in ("producer", "consumer", "compiler", "predicted", "rule")})
                for n, mf in self.modules.items() for r in mf.rows if not r["agree"]]

    def record(self, evidence) -> None:
        """Record the programs' table, the totals, the mispredictions (when any) and the
        one-rule-left-out table."""
        evidence.table("decisions of the fusion pass per program, logged by XLA and predicted by the "
                       "model; the extra bytes (read + written, spill-style) of the program compiled "
                       "with xla_disable_hlo_passes=fusion, predicted by the model and measured on the "
                       "two optimized modules", self.per_program + self.held, fold=True)
        evidence.number("decisions logged, all programs", self.logged)
        evidence.number("decisions predicted exactly, all programs", self.agreed)
        # A rendered run has no misprediction to list (the claim asserts every decision
        # predicted; its note says so: a table holding "(none)" read as a result); the table
        # stands when one exists.
        if self.misses:
            evidence.table("every decision the model mispredicts, with the rule that made the prediction",
                           self.misses)
        evidence.table(f"the model with one rule left out: decisions it then mispredicts, over the {len(SUITE)} "
                       "programs", [{"rule left out": r, "mispredicted decisions": n}
                                    for r, n in self.knockouts.items()], fold=True)


def policy_across_programs(dump, unfused, passes) -> PolicyAcrossPrograms:
    """The fusion pass of every program above against the model, through the claim's ``dump``
    and ``unfused`` fixtures (``unfused`` disables ``passes``): per SUITE program its decisions
    logged and predicted and the extra bytes of undoing the pass, predicted by fusion_policy on
    the snapshot the pass saw and measured on the two optimized modules, with its knock-outs
    (each rule of fusion_policy.RULES left out in turn: decisions then mispredicted); per
    held-out or written-after program its decisions only."""
    from .fusion import module_fusion
    from .fusion_policy import RULES, undo_fusion_bytes
    per_program, held, mods, knockouts = [], [], {}, {r: 0 for r in RULES}
    inputs = programs()
    for name in SUITE:
        fn, args = inputs[name]
        d = dump(fn, *args)
        mf = mods[name] = module_fusion(d)
        for rule, n in mf.knockouts().items():
            knockouts[rule] += n
        unfused_b, fused_b = undo_fusion_bytes(mf.before.module)
        plain = unfused(fn, *args, passes=passes)
        per_program.append({"program": name, "decisions logged": len(mf.log), "predicted": mf.agreed,
                            "extra bytes predicted": unfused_b - fused_b,
                            "extra bytes measured": plain.traffic - d.traffic})
    for name, kind in [(n, "held out") for n in HELD_OUT] + [(n, "written after") for n in WRITTEN_AFTER]:
        fn, args = inputs[name]
        mf = mods[name] = module_fusion(dump(fn, *args))
        held.append({"program": f"{name} ({kind})", "decisions logged": len(mf.log),
                     "predicted": mf.agreed, "extra bytes predicted": "", "extra bytes measured": ""})
    return PolicyAcrossPrograms(per_program, held, mods, knockouts)


def record_policy_from_the_page(evidence, folder: Path) -> tuple[subprocess.CompletedProcess, str]:
    """Run the two listings alone in the empty ``folder`` (``run_from_the_page``) and record
    them, with the commands and the last line they printed, for a reader to run.  Returns the
    process and that line (the total), for the claim to judge."""
    from .fusion import model_listing
    folder.mkdir(parents=True, exist_ok=True)
    done = run_from_the_page(folder)
    total = done.stdout.strip().split("\n")[-1] if done.stdout.strip() else ""
    evidence.excerpt("programs.py: every program above with its inputs (shapes, dtypes, static "
                     "arguments), as they ran", programs_listing(), lang="python", fold=True)
    evidence.excerpt("fusion_model.py: the model, whole, with the HLO reader, the fusion-log reader and "
                     "the comparison it needs (every definition they reach, cut from pytest_dumpref's "
                     "source as it ran; plain Python)", model_listing(), lang="python", fold=True)
    evidence.excerpt("the same total from the two listings alone (programs.py and fusion_model.py, "
                     "the model as one file, both in the fold at the end of this claim), with plain "
                     "jax (this claim runs exactly this in an empty folder; the last line printed)",
                     PROGRAMS_COMMANDS + "\n# " + total, lang="bash", fold=False)
    return done, total


def timed_dumps(dump, passes) -> tuple[dict, dict, dict, dict]:
    """Every program of TIMED dumped through the claim's ``dump`` fixture (only the fusion
    pass's snapshots), fused and with ``passes`` disabled, and its timing variants: (SUITE
    program -> extra bytes fusion_policy predicts for undoing the pass; program -> (fused dump,
    unfused dump); variant -> compiler options; variant -> (program, argument spec)).  A
    program outside SUITE that the cost model refuses is dumped (the claim says why it is
    refused) but not timed."""
    from . import cost_model
    from .fusion import snapshot_before_fusion
    from .fusion_policy import undo_fusion_bytes
    disabled = {"xla_disable_hlo_passes": ",".join(passes)}
    predicted_bytes, dumps, variants, timed = {}, {}, {}, {}
    for name, (function, spec) in TIMED.items():
        fn, args = getattr(examples, function), arrays(spec)
        d = dump(fn, *args, passes="^fusion$")
        dumps[name] = (d, dump(fn, *args, passes="^fusion$", **disabled))
        if name in SUITE:
            unfused_b, fused_b = undo_fusion_bytes(snapshot_before_fusion(d).module)
            predicted_bytes[name] = unfused_b - fused_b
        elif any(cost_model.analyse(x.optimized_text, x.buffer_assignment).refused for x in dumps[name]):
            continue
        for v, opt in (("fused", {}), ("A/A", {}), ("unfused", disabled)):
            variants[f"{name}: {v}"] = opt
            timed[f"{name}: {v}"] = (f"pytest_dumpref.examples:{function}", tuple(spec))
    return predicted_bytes, dumps, variants, timed
