"""Record the TPU corpus the tests read: run on a machine with a TPU, from the checkout's root,

    PYTHONPATH=$PYTHONPATH:$PWD python3 tests/xla_tpu/record_tpu_corpus.py OUT_DIR [NAME ...]

For each program (the fusion study's programs, softmax over f32[8192,8192], and models written
with flax and optax when those import), it compiles two variants on the TPU: default options and
``xla_disable_hlo_passes=tpu_fusion``, each with a text dump (every pass for a few programs) and
the fusion log, into OUT_DIR/<name>/<variant>/.  Beside each dump: ``cost.json`` (the compiled
program's cost analysis, XLA's own count) and ``times.json`` (device time per kernel and per call
from jax's profiler).  ``environment.json`` says where it ran.  The committed corpus
(tests/xla_tpu/corpus/) holds the files of it that the tests read.
"""
from __future__ import annotations

import glob
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import jax
import numpy as np

from pytest_dumpref import examples
from pytest_dumpref.xla.cpu.fusion_programs import TIMED
from pytest_dumpref.timing import fill

EVERY_PASS = {"softmax", "softmax_8192", "layernorm", "mlp", "transformer_block", "adam_update"}
CALLS = 7


def programs() -> dict:
    out = {"softmax_8192": (examples.softmax, [("float32", (8192, 8192))])}
    for name, (function, spec) in TIMED.items():
        out[name] = (getattr(examples, function), spec)
    return out


def model_programs() -> dict:
    """Programs written with flax and optax (absent when they do not import)."""
    try:
        import flax.linen as nn
        import optax
    except ImportError:
        return {}

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.LayerNorm()(x)
            x = nn.gelu(nn.Dense(1024)(x))
            return nn.Dense(256)(x)

    model = Mlp()
    x0 = np.zeros((512, 256), np.float32)
    params = model.init(jax.random.PRNGKey(0), x0)
    tx = optax.adamw(1e-3)
    opt_state = tx.init(params)

    def flax_mlp_train_step(params, opt_state, x, y):
        def loss(p):
            return optax.l2_loss(model.apply(p, x), y).mean()
        g = jax.grad(loss)(params)
        updates, opt_state = tx.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def flax_mlp_forward(params, x):
        return model.apply(params, x)

    def optax_adamw_update(params, opt_state, g):
        updates, opt_state = tx.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return {
        "flax_mlp_train_step": (flax_mlp_train_step, (params, opt_state, x0, np.zeros((512, 256), np.float32))),
        "flax_mlp_forward": (flax_mlp_forward, (params, x0)),
        "optax_adamw_update": (optax_adamw_update, (params, opt_state, params)),
    }


def profile(compiled, args, folder: Path) -> dict:
    from jax._src.profiler import ProfileData
    for _ in range(2):
        jax.block_until_ready(compiled(*args))
    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp)
        for _ in range(CALLS):
            jax.block_until_ready(compiled(*args))
        jax.profiler.stop_trace()
        (pb,) = glob.glob(f"{tmp}/**/*.xplane.pb", recursive=True)
        data = ProfileData.from_file(pb)
    out: dict = {"lines": {}}
    for plane in data.planes:
        if not plane.name.startswith("/device:TPU"):
            continue
        for line in plane.lines:
            if line.name not in ("XLA Modules", "XLA Ops"):
                continue
            out["lines"][line.name] = [
                {"name": e.name.split("\n")[0][:300], "start_ns": e.start_ns, "duration_ns": e.duration_ns}
                for e in line.events]
        out["plane"] = plane.name
        break
    return out


def record(name, fn, args, out: Path, deadline: float) -> None:
    for variant, extra in (("fused", {}), ("unfused", {"xla_disable_hlo_passes": "tpu_fusion"})):
        if time.time() > deadline:
            print(f"{name} {variant}: out of time", flush=True)
            return
        folder = out / name / variant
        folder.mkdir(parents=True, exist_ok=True)
        opts = {"xla_dump_to": str(folder), "xla_dump_hlo_as_text": True,
                "xla_dump_fusion_visualization": True, **extra}
        if name in EVERY_PASS:
            opts["xla_dump_hlo_pass_re"] = ".*"
        t0 = time.time()
        try:
            dev = [jax.device_put(a) for a in args] if isinstance(args, list) else jax.device_put(args)
            dev = dev if isinstance(dev, list) else list(dev)
            compiled = jax.jit(fn).lower(*dev).compile(compiler_options=opts)
            cost = compiled.cost_analysis()
            cost = cost[0] if isinstance(cost, list) else cost
            (folder / "cost.json").write_text(json.dumps({k: float(v) for k, v in cost.items()}, indent=1, sort_keys=True))
            try:
                m = compiled.memory_analysis()
                (folder / "memory.json").write_text(json.dumps(
                    {k: getattr(m, k) for k in dir(m) if k.endswith("in_bytes")}, indent=1))
            except Exception as e:
                print(f"{name} {variant}: memory_analysis: {e}", flush=True)
            t1 = time.time()
            (folder / "times.json").write_text(json.dumps(profile(compiled, dev, folder), indent=1))
            print(f"{name} {variant}: compiled in {t1 - t0:.1f} s, profiled in {time.time() - t1:.1f} s",
                  flush=True)
        except Exception:
            (folder / "error.txt").write_text(traceback.format_exc())
            print(f"{name} {variant}: FAILED\n{traceback.format_exc()}", flush=True)


def main() -> None:
    out = Path(sys.argv[1])
    only = set(sys.argv[2:])
    budget = float(os.environ.get("RECORD_BUDGET_S", "420"))
    deadline = time.time() + budget
    out.mkdir(parents=True, exist_ok=True)
    d = jax.devices()[0]
    env = {"device_kind": d.device_kind, "platform": d.platform, "jax": jax.__version__}
    import jaxlib
    env["jaxlib"] = jaxlib.__version__
    try:
        import libtpu
        env["libtpu"] = getattr(libtpu, "__version__", None)
    except ImportError:
        pass
    (out / "environment.json").write_text(json.dumps(env, indent=1))
    print(env, flush=True)
    # each program's arrays from a fresh default_rng(0), as fusion_programs fills them on the CPU
    progs = {}
    for n, (fn, spec) in programs().items():
        rng = np.random.default_rng(0)
        progs[n] = (fn, [fill(rng, dt, sh) for dt, sh in spec])
    progs.update(model_programs())
    for name, (fn, args) in progs.items():
        if only and name not in only:
            continue
        record(name, fn, args, out, deadline)


if __name__ == "__main__":
    main()
