# program.py: k_scale, k_fill, k_mul, k_exp_alone, k_cheap, k_short_run, k_age, k_age_spin, k_age_base, k_age_base_spin, k_chain, k_exp, k_tanh, k_log, k_divide, k_sqrt, k_rsqrt, k_select, k_integer, k_rowsum, k_colsum, k_transpose, k_transpose_alone, k_fill_scalar, k_cheap_scalar, k_tanh_scalar, k_mul_chain, k_unary_chain, k_select_chain, k_compare_chain, k_exp_chain, k_tanh_chain, k_divide_chain, k_sqrt_chain, k_dot, k_conv from pytest_dumpref.xla.cpu.calibrate; softmax from pytest_dumpref.examples, as they ran, with what they use
import functools
import json
import math
import os
import statistics
import time
import types
from collections.abc import Mapping
from pathlib import Path
import jax
import jax.numpy as jnp
import numpy as np


ROW = 1024                                    # every calibration array is f32[rows, 1024]


ONE_OP_CHAIN = 16                             # one-op kernels a call (k_mul_chain)


AGE_SPIN = 1000                               # the age kernels' spin: cheap ops an element


CHAIN = 16


def k_scale(x):
    return x * 2.0


def k_fill(v):
    import jax.numpy as jnp
    return jnp.broadcast_to(v[:, None], (v.shape[0], ROW)) + 0.0


def k_mul(x, y):
    return x * y


def k_mul_chain(x, y):
    # Compiled without the fusion pass: ONE_OP_CHAIN one-op kernels (wrapped_multiply).  One
    # x * y a call is not enough: on an AMD EPYC (1 MiB L2) its whole call's slope per element
    # between 8 and 64 rows came out 0.14, 0.23 and 0.21 ns between successive pairs in one
    # run, while this chain's was 0.124-0.135 at every pair from 8 to 256 rows, as jax's
    # profiler timed the kernel itself (0.128-0.142): the difference the slope rests on is 16
    # times as large, and whatever else a call costs that moves with its size is paid once.
    for _ in range(ONE_OP_CHAIN):
        x = x * y
    return x


def k_unary_chain(x):
    # The same floor for a one-op kernel of one operand: negate and floor in turn (XLA folds
    # a negate of a negate, not a floor of one), ONE_OP_CHAIN kernels a call.
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN // 2):
        x = jnp.floor(-x)
    return x


def k_compare_chain(x, y, z):
    # A compare's floor: ONE_OP_CHAIN compares (each writes a mask of one byte an element),
    # each with the select that reads its mask; the selects' own floor (k_select_chain) is
    # taken out of the slope.
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN):
        x = jnp.where(x > y, z, x)
    return x


def k_select_chain(p, q, x, y):
    # A select's floor: ONE_OP_CHAIN selects on two masks in turn (XLA folds a select on the
    # mask of the select it reads).
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN // 2):
        x = jnp.where(p, x, y)
        x = jnp.where(q, y, x)
    return x


def _spin(c, n):
    for _ in range(n):
        c = c * 1.0001 + 0.5                  # one loop kernel of 2n cheap ops an element
    return c


def k_age(c, x):
    # the stream y = 2x with AGE_SPIN ops an element of c beside it, in one call: x's and y's
    # memory is as many milliseconds older at each call as the spin takes
    return _spin(c, AGE_SPIN), x * 2.0


def k_age_spin(c):
    return _spin(c, AGE_SPIN)


def k_age_base(c, x):
    return _spin(c, 1), x * 2.0


def k_age_base_spin(c):
    return _spin(c, 1)


def k_cheap(x):
    for _ in range(16):                       # 32 float ops an element, nothing to fold
        x = x * 1.0001 + 0.5
    return x


def k_short_run(*parts):
    """SHORT_RUN_PARTS f32[rows, 256] side by side: XLA:CPU copies each operand's row with a
    memmove of 1 KiB, in runs shorter than a page (cost_model.short_runs), the bytes and
    distance of the stream over f32[rows, 1024]."""
    import jax.numpy as jnp
    return jnp.concatenate(parts, axis=1)


def k_chain(x):
    """16 dependent elementwise ops: 16 kernels when the fusion passes are off."""
    for k in range(CHAIN):
        x = x * 1.0001 if k % 2 else x + 0.5
    return x


def k_exp(x):
    import jax.numpy as jnp
    return jnp.exp(x) + 0.5                   # add: 1 cheap op


def k_tanh(x):
    import jax.numpy as jnp
    return jnp.tanh(x) + 0.5                  # add: 1 cheap op


def k_log(x):
    import jax.numpy as jnp
    return jnp.log(jnp.abs(x) + 1.0)          # abs and add: 2 cheap ops beside the log


def k_divide(x, y):
    return x / y + 0.5                        # add: 1 cheap op


def k_sqrt(x):
    import jax.numpy as jnp
    return jnp.sqrt(jnp.abs(x))               # abs: 1 cheap op


def k_rsqrt(x):
    import jax
    import jax.numpy as jnp
    return jax.lax.rsqrt(jnp.abs(x) + 1.0)    # abs, add: 2 cheap ops


def k_exp_alone(x):
    import jax.numpy as jnp
    return jnp.exp(x)


def k_exp_chain(x):
    # exp(exp(x)) overflows to inf after a few links: XLA's exp clamps its argument and runs
    # the same instructions for any value (a chain of exp(-x), whose values stay finite, less
    # its negates, cost the same: 391 and 392 ps an element)
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN):
        x = jnp.exp(x)
    return x


def k_tanh_chain(x):
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN):
        x = jnp.tanh(x)
    return x


def k_divide_chain(x, y):
    # Compiled without algsimp too, which makes (x / y) / y a division by y * y: one divide
    # and fifteen multiplies.  Standard normal y: sixteen divisions move |x| by e^10 or so,
    # far from overflow and denormals.
    for _ in range(ONE_OP_CHAIN):
        x = x / y
    return x


def k_sqrt_chain(x):
    import jax.numpy as jnp
    for _ in range(ONE_OP_CHAIN):
        x = jnp.sqrt(x)                       # NaN for negative x, at the same speed
    return x


def k_transpose(x, y):
    return x.T + y                            # XLA's copy_add_fusion: x read across its rows


def k_transpose_alone(x):
    return x.T                                # compiled without fusion (ALONE_OPTIONS): wrapped_copy


def k_fill_scalar(b, x):
    import jax.numpy as jnp
    return jnp.broadcast_to(b, x.shape)       # x f32[n, 32] gives the shape only: no operation


def k_cheap_scalar(x, b):
    import jax.numpy as jnp
    return jnp.maximum(x + b, 0.0)            # x f32[n, 32], b f32[32]: 2 cheap ops an element


def k_tanh_scalar(x):
    import jax.numpy as jnp
    return jnp.pad(jnp.tanh(x), ((0, 0), (0, 8))) + 0.5    # the tanh inside the pad's bounds test


def k_select(x, y):
    import jax.numpy as jnp
    for k in range(8):                        # 8 compare + 8 select an element
        x = jnp.where(x > y, y, x) if k % 2 else jnp.where(y > x, x, y)
    return x


def k_integer(x, y):
    for _ in range(4):                        # 3 integer ops each: 12 an element
        x = (x * 3 + y) ^ y
    return x


def k_rowsum(x):
    import jax.numpy as jnp
    return jnp.sum(x, axis=1)


def k_colsum(x):
    import jax.numpy as jnp
    return jnp.sum(x, axis=0)


def k_dot(a, b):
    return a @ b


def k_conv(x, w):
    import jax
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def softmax(x):
    """Row softmax with the usual max subtraction (what jax.nn.softmax lowers to)."""
    m = jnp.max(x, axis=-1, keepdims=True)
    e = jnp.exp(x - m)
    return e / jnp.sum(e, axis=-1, keepdims=True)
