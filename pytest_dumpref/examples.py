"""Reference programs: the pieces of a real model that the write-up, the tests and the
benchmarks compile.  Plain JAX functions of arrays, no framework, so their HLO is easy
to read and their parameter shapes are exactly what the caller passes.

Shapes used by the write-up are chosen by the claims, not here.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def softmax(x):
    """Row softmax with the usual max subtraction (what jax.nn.softmax lowers to)."""
    m = jnp.max(x, axis=-1, keepdims=True)
    e = jnp.exp(x - m)
    return e / jnp.sum(e, axis=-1, keepdims=True)


def layernorm(x, gamma, beta, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * gamma + beta


def gelu(x):
    """The tanh approximation used by GPT-2 style models."""
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def mlp(x, w1, b1, w2, b2):
    return gelu(x @ w1 + b1) @ w2 + b2


def causal_attention(x, wq, wk, wv, wo, n_heads):
    """Multi-head causal self-attention over x: [batch, seq, d_model]."""
    b, s, d = x.shape
    hd = d // n_heads

    def heads(t):  # [b, s, d] -> [b, h, s, hd]
        return t.reshape(b, s, n_heads, hd).transpose(0, 2, 1, 3)

    q, k, v = heads(x @ wq), heads(x @ wk), heads(x @ wv)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(hd)
    mask = jnp.tril(jnp.ones((s, s), dtype=bool))
    scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    p = softmax(scores)
    out = jnp.einsum("bhqk,bhkd->bhqd", p, v).transpose(0, 2, 1, 3).reshape(b, s, d)
    return out @ wo


def transformer_block(x, params, n_heads):
    """Pre-norm GPT-2 style block: x + attn(ln1(x)), then + mlp(ln2(.))."""
    h = x + causal_attention(layernorm(x, params["ln1_g"], params["ln1_b"]),
                             params["wq"], params["wk"], params["wv"], params["wo"], n_heads)
    return h + mlp(layernorm(h, params["ln2_g"], params["ln2_b"]),
                   params["w1"], params["b1"], params["w2"], params["b2"])


def transformer_params(d_model, d_ff, seed=0, dtype=np.float32):
    """Deterministic parameters (numpy RNG, so no device is touched to make them)."""
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(dtype)

    return {
        "ln1_g": np.ones(d_model, dtype), "ln1_b": np.zeros(d_model, dtype),
        "wq": w(d_model, d_model), "wk": w(d_model, d_model),
        "wv": w(d_model, d_model), "wo": w(d_model, d_model),
        "ln2_g": np.ones(d_model, dtype), "ln2_b": np.zeros(d_model, dtype),
        "w1": w(d_model, d_ff), "b1": np.zeros(d_ff, dtype),
        "w2": w(d_ff, d_model), "b2": np.zeros(d_model, dtype),
    }


def block_stack(x, layers, n_heads):
    """Several transformer blocks in sequence (unrolled; used by the dump benchmarks)."""
    for p in layers:
        x = transformer_block(x, p, n_heads)
    return x


def scan_rnn(h0, xs, w):
    """A while loop (lax.scan) with a tanh cell: the loop case for traffic accounting."""
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h
    return jax.lax.scan(step, h0, xs)


def sgd_step(params, x, y, lr=0.1):
    """One SGD step of a two-layer MLP with squared loss."""
    def loss(p):
        pred = mlp(x, p["w1"], p["b1"], p["w2"], p["b2"])
        return jnp.mean((pred - y) ** 2)
    grads = jax.grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


# ---- pieces of a model for the fusion study's programs (Study 2, across programs) ----------

def rmsnorm(x, gamma, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps) * gamma


def swiglu(x, w1, w3):
    """The gated MLP of LLaMA-style models: silu(x @ w1) * (x @ w3)."""
    a = x @ w1
    return a * jax.nn.sigmoid(a) * (x @ w3)


def attention_scores(q, k):
    """One head's causal attention weights: softmax(q k^T / sqrt(d)) under a causal mask."""
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    n = s.shape[-1]
    s = jnp.where(jnp.tril(jnp.ones((n, n), dtype=bool)), s, jnp.finfo(s.dtype).min)
    return softmax(s)


def cross_entropy(logits, labels):
    """Mean cross-entropy of integer labels: log-softmax, then the label's entry per row."""
    m = jnp.max(logits, axis=-1, keepdims=True)
    logp = logits - m - jnp.log(jnp.sum(jnp.exp(logits - m), axis=-1, keepdims=True))
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def adam_update(p, g, m, v, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, step=10):
    """One Adam step (bias-corrected) on one parameter: new parameter and both moments."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * jnp.square(g)
    mhat = m / (1 - b1 ** step)
    vhat = v / (1 - b2 ** step)
    return p - lr * mhat / (jnp.sqrt(vhat) + eps), m, v


def sgd_momentum(p, g, buf, lr=0.01, momentum=0.9, weight_decay=1e-4):
    buf = momentum * buf + g + weight_decay * p
    return p - lr * buf, buf


def gelu_grad(x):
    """The gradient of sum(gelu(x)): the backward pass of an activation."""
    return jax.grad(lambda t: jnp.sum(gelu(t)))(x)


def layernorm_grad(x, gamma, beta):
    """Gradients of sum(layernorm(x) ** 2) with respect to x, gamma and beta."""
    return jax.grad(lambda *a: jnp.sum(layernorm(*a) ** 2), argnums=(0, 1, 2))(x, gamma, beta)


def conv_bias_relu(x, w, b):
    """A 3x3 convolution (NHWC, same padding), bias and ReLU: a CNN's basic block."""
    y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu(y + b)


def residual_layernorm(x, h, bias, gamma, beta):
    """Post-norm residual: layernorm(x + h + bias), as after a block's projection."""
    return layernorm(x + h + bias, gamma, beta)


def huber_loss(pred, target, delta=1.0):
    r = jnp.abs(pred - target)
    return jnp.mean(jnp.where(r < delta, 0.5 * r * r, delta * (r - 0.5 * delta)))


def rope(x, base=10000.0):
    """Rotary position embedding of x: [seq, head_dim], its angle tables computed in numpy
    when traced (so they reach XLA as constants, as they often do in real models)."""
    s, d = x.shape
    angles = np.arange(s)[:, None] / base ** (np.arange(0, d, 2)[None, :] / d)
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    x1, x2 = x[:, 0::2], x[:, 1::2]
    return jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).reshape(s, d)



# ---- programs written after the fusion model was finished, to try it on shapes of decision ----
# the programs above lack (xla/fusion_programs.WRITTEN_AFTER): an in-place update,
# concatenations, a transpose, a pad, slices, a matrix-vector product, a sort, bf16, a scan
# (cumsum), a masked sum.

def kv_cache_update(cache, new, pos=3):
    return jax.lax.dynamic_update_slice(cache, new * 2.0 + 1.0, (pos, 0))


def concat_heads(a, b, c, d):
    return jnp.tanh(jnp.concatenate([a, b, c, d], axis=1)) * 2


def concat_rows(a, b):
    return jnp.exp(jnp.concatenate([a, b], axis=0)) + 1


def log_softmax(x):
    return jax.nn.log_softmax(x)


def silu_grad(x):
    return jax.grad(lambda t: jnp.sum(jax.nn.silu(t)))(x)


def batchnorm(x):
    return (x - x.mean(0)) / jnp.sqrt(x.var(0) + 1e-5)


def transpose_add(x, y):
    return jnp.exp(x.T) + y


def pad_tanh(x):
    return jnp.pad(jnp.tanh(x), ((1, 1), (1, 1))) * 3


def halves(x):
    return jnp.exp(x[:, :512]) + jnp.exp(x[:, 512:])


def matvec_tanh(w, v, b):
    return jnp.tanh(w @ v + b)


def top_k(x):
    return jax.lax.top_k(jnp.exp(x), 4)[0] * 2


def bf16_dense_gelu(x, w):
    return jax.nn.gelu((x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)).astype(jnp.float32))


def masked_row_sum(x, m):
    return jnp.where(m > 0, jnp.exp(x), 0.0).sum(1)


def cumsum_exp(x):
    return jnp.cumsum(jnp.exp(x), axis=1)


# ---- the programs above that take more than arrays, as functions of arrays alone -------------
# (what pytest_dumpref.timing can time: it fills each argument from a (dtype, shape))

TRANSFORMER_PARAMS = ("ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w1", "b1", "w2", "b2")


def transformer_block_4_heads(x, *params):
    """transformer_block with 4 heads, its parameters in the order of TRANSFORMER_PARAMS."""
    return transformer_block(x, dict(zip(TRANSFORMER_PARAMS, params)), 4)


def causal_attention_4_heads(x, wq, wk, wv, wo):
    return causal_attention(x, wq, wk, wv, wo, 4)


def sgd_step_of_arrays(w1, b1, w2, b2, x, y):
    """sgd_step on the parameters {"w1", "b1", "w2", "b2"}."""
    return sgd_step({"w1": w1, "b1": b1, "w2": w2, "b2": b2}, x, y)


# ---- a small GPT-2 style language model, trained one step (Study 3's end-to-end program) ----

def gpt2_params(vocab, seq, d_model, n_layers, d_ff, seed=0, dtype=np.float32):
    """Token and position embeddings, `n_layers` blocks stacked on a leading axis (so the
    layers run under lax.scan), a final layernorm; the output projection is the token
    embedding transposed (weight tying, as GPT-2 does)."""
    rng = np.random.default_rng(seed)
    blocks = [transformer_params(d_model, d_ff, seed=seed + 1 + k, dtype=dtype) for k in range(n_layers)]
    return {
        "wte": (0.02 * rng.standard_normal((vocab, d_model))).astype(dtype),
        "wpe": (0.01 * rng.standard_normal((seq, d_model))).astype(dtype),
        "blocks": {k: np.stack([b[k] for b in blocks]) for k in blocks[0]},
        "lnf_g": np.ones(d_model, dtype), "lnf_b": np.zeros(d_model, dtype),
    }


def gpt2_logits(params, tokens, n_heads):
    """tokens: int32 [batch, seq] -> logits [batch, seq, vocab]."""
    x = params["wte"][tokens] + params["wpe"][None, : tokens.shape[1]]  # gathers

    def layer(h, p):
        return transformer_block(h, p, n_heads), None

    x, _ = jax.lax.scan(layer, x, params["blocks"])
    x = layernorm(x, params["lnf_g"], params["lnf_b"])
    return x @ params["wte"].T


def gpt2_loss(params, tokens, n_heads):
    """Next-token cross-entropy: position t predicts token t+1."""
    logits = gpt2_logits(params, tokens[:, :-1], n_heads)
    b, s, v = logits.shape
    return cross_entropy(logits.reshape(b * s, v), tokens[:, 1:].reshape(b * s))


def gpt2_train_step(params, opt_state, tokens, n_heads=2, lr=1e-3):
    """One Adam step on the GPT-2 loss: the gradient flows back through the scan, the
    attention and the embedding gathers (a scatter-add into wte and wpe).  opt_state holds
    the moments `m`, `v` (trees like params) and the step count `t` (float32 scalar)."""
    loss, grads = jax.value_and_grad(gpt2_loss)(params, tokens, n_heads)
    t = opt_state["t"] + 1.0
    b1, b2, eps = 0.9, 0.999, 1e-8
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, opt_state["m"], grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, opt_state["v"], grads)
    scale = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    params = jax.tree_util.tree_map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
    return params, {"m": m, "v": v, "t": t}, loss


def gpt2_opt_state(params):
    zeros = jax.tree_util.tree_map(lambda p: np.zeros_like(p), params)
    return {"m": zeros, "v": jax.tree_util.tree_map(np.copy, zeros), "t": np.float32(0.0)}


def gpt2_step_inputs(vocab=64, seq=16, d_model=32, n_layers=2, d_ff=64, batch=2, seed=0):
    """Parameters, a fresh optimizer state and a batch of tokens for gpt2_train_step."""
    params = gpt2_params(vocab, seq + 1, d_model, n_layers, d_ff, seed=seed)
    tokens = np.random.default_rng(seed + 100).integers(0, vocab, (batch, seq + 1)).astype(np.int32)
    return params, gpt2_opt_state(params), tokens


def max_errors(expected, got):
    """The largest absolute difference over all leaves, and the largest relative one (each
    leaf's difference over that leaf's largest magnitude)."""
    worst_abs = worst_rel = 0.0
    for e, g in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(got)):
        e, g = np.asarray(e, np.float64), np.asarray(g, np.float64)
        if e.size == 0:
            continue
        diff = float(np.max(np.abs(e - g)))
        scale = float(np.max(np.abs(e)))
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / scale if scale > 0 else diff)
    return {"max_abs": worst_abs, "max_rel": worst_rel}
