"""The whole-layer model (``hmoe_estim.layer``): its output equals an independent NumPy
evaluation for every gate, form and activation, equals ``multihead_attention`` and the
per-entry HMoE of ``attention_to_measure`` where those exist, and bad input is refused with a
message that says what to change."""

import math

import numpy as np
import pytest

from hmoe_estim import regression_function
from hmoe_estim.attention import attention_to_measure, multihead_attention
from hmoe_estim.layer import (
    AttentionLayer,
    LayerLayout,
    attention_layer_output,
    make_attention_regression,
    random_attention_layer,
)

ACTIVATIONS = ("sigmoid", "tanh", "gelu", "silu")
GATES = ("none", "value", "sdpa", "output", "key", "query")
BILINEAR = ("none", "value", "sdpa", "output")


def _phi(name, z):
    """φ written out independently of the package."""
    if name == "sigmoid":
        return 1.0 / (1.0 + math.exp(-z))
    if name == "tanh":
        return math.tanh(z)
    if name == "gelu":
        return 0.5 * z * (1.0 + math.erf(z / math.sqrt(2.0)))
    return z / (1.0 + math.exp(-z))  # silu


def reference_output(X, layer, gate, activation, rows="all"):
    """The layer, loop by loop over samples, heads, rows, keys and channels."""
    n, N, d = X.shape
    H, dv, dout = layer.n_heads, layer.head_dim, layer.d_out
    phi = lambda z: _phi(activation, z)  # noqa: E731
    row_ids = [N - 1] if rows == "last" else list(range(N))
    Y = np.zeros((n, len(row_ids), dout))
    for s in range(n):
        x = X[s]
        for a, i in enumerate(row_ids):
            z = np.zeros(dout)
            for h in range(H):
                scores = np.zeros(N)
                for j in range(N):
                    if layer.P is not None:
                        scores[j] = x[i] @ layer.P[h] @ x[j]
                        continue
                    for e in range(dv):
                        q = x[i] @ layer.W_Q[h][:, e]
                        k = x[j] @ layer.W_K[h][:, e]
                        if gate == "key":
                            k = phi(k)
                        if gate == "query":
                            q = phi(q)
                        scores[j] += q * k / math.sqrt(dv)
                w = np.exp(scores - scores.max())
                w /= w.sum()
                for e in range(dv):
                    u = 0.0
                    for j in range(N):
                        v = x[j] @ layer.W_V[h][:, e]
                        u += w[j] * (phi(v) if gate == "value" else v)
                    if layer.W_theta is not None:
                        wt = layer.W_theta[h] if layer.W_theta.ndim == 2 else layer.W_theta[h][:, e]
                        o = u * phi(x[i] @ wt)
                    elif gate == "sdpa":
                        o = phi(u)
                    else:
                        o = u
                    for c in range(dout):
                        z[c] += o * layer.W_O[h, e, c]
            if gate == "output":
                z = np.array([phi(t) for t in z])
            if layer.intercept is not None:
                z = z + layer.intercept
            Y[s, a] = z
    return Y[:, 0] if rows == "last" else Y


def _tokens(n=4, N=3, d=3, seed=1):
    return np.random.default_rng(seed).normal(size=(n, N, d))


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("gate", GATES)
def test_output_equals_reference(gate, activation):
    layer = random_attention_layer(2, 3, 2, 4, fit_intercept=True, random_state=0)
    X = _tokens()
    out = attention_layer_output(X, layer, gate=gate, activation=activation)
    np.testing.assert_allclose(out, reference_output(X, layer, gate, activation), rtol=1e-12,
                               atol=1e-12)
    last = attention_layer_output(X, layer, gate=gate, activation=activation, rows="last")
    np.testing.assert_allclose(last, out[:, -1], rtol=0, atol=0)


@pytest.mark.parametrize("gate", BILINEAR)
def test_full_scores_equal_reference(gate):
    layer = random_attention_layer(2, 3, 2, qk="full", random_state=2)
    X = _tokens()
    out = attention_layer_output(X, layer, gate=gate, activation="tanh", rows="last")
    np.testing.assert_allclose(out, reference_output(X, layer, gate, "tanh", rows="last"),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("granularity", ("headwise", "elementwise"))
def test_multiplicative_gate_equals_reference(granularity, activation):
    layer = random_attention_layer(2, 3, 2, gate_form="multiplicative", granularity=granularity,
                                   random_state=3)
    assert layer.granularity == granularity
    X = _tokens()
    out = attention_layer_output(X, layer, gate="sdpa", activation=activation)
    np.testing.assert_allclose(out, reference_output(X, layer, "sdpa", activation),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("gate", BILINEAR)
def test_equals_multihead_attention_and_each_entry_hmoe(gate):
    layer = random_attention_layer(2, 3, 2, random_state=4)
    X = _tokens(n=2)
    out = attention_layer_output(X, layer, gate=gate, activation="silu")
    direct = multihead_attention(X, layer.W_Q, layer.W_K, layer.W_V, layer.W_O, gate=gate,
                                 activation="silu")
    np.testing.assert_allclose(out, direct, rtol=1e-12, atol=1e-13)
    N = X.shape[1]
    for row in range(N):
        for column in range(layer.d_out):
            G = attention_to_measure(layer.W_Q, layer.W_K, layer.W_V, layer.W_O, n_tokens=N,
                                     row=row, column=column)
            entry = regression_function(G, X.reshape(X.shape[0], -1), gate=gate,
                                        activation="silu")
            np.testing.assert_allclose(out[:, row, column], entry, rtol=1e-11, atol=1e-12)


def test_pack_unpack_round_trip_and_gauge_free_quantities():
    for kw in ({}, {"qk": "full"}, {"gate_form": "multiplicative"},
               {"gate_form": "multiplicative", "granularity": "elementwise",
                "fit_intercept": True}):
        layer = random_attention_layer(2, 3, 2, 4, random_state=5, **kw)
        layout = layer.layout
        theta = layout.pack(layer)
        assert theta.shape == (layout.n_params,)
        back = layout.unpack(theta)
        np.testing.assert_array_equal(layout.pack(back), theta)
        np.testing.assert_allclose(back.P_, layer.P_)
        np.testing.assert_allclose(back.VO_, layer.VO_)
    layer = random_attention_layer(1, 3, 2, random_state=6)
    A = np.array([[2.0, 1.0], [0.5, 1.5]])
    moved = AttentionLayer(W_Q=layer.W_Q @ A, W_K=layer.W_K @ np.linalg.inv(A).T,
                           W_V=layer.W_V @ A, W_O=np.linalg.inv(A) @ layer.W_O)
    np.testing.assert_allclose(moved.P_, layer.P_, atol=1e-13)
    np.testing.assert_allclose(moved.VO_, layer.VO_, atol=1e-13)
    X = _tokens()
    np.testing.assert_allclose(attention_layer_output(X, moved),
                               attention_layer_output(X, layer), atol=1e-12)


def test_data_generator():
    layer = random_attention_layer(1, 3, 2, random_state=0)
    X, Y = make_attention_regression(30, layer, n_tokens=4, gate="query", noise=0.0,
                                     random_state=1)
    assert X.shape == (30, 4, 3) and Y.shape == (30, 4, 3)
    np.testing.assert_array_equal(Y, attention_layer_output(X, layer, gate="query"))
    X2, Y2 = make_attention_regression(30, layer, n_tokens=4, gate="query", noise=0.5,
                                       random_state=1)
    np.testing.assert_array_equal(X2, X)
    assert 0.3 < np.std(Y2 - Y) < 0.7
    Xu, Yl = make_attention_regression(10, layer, n_tokens=2, rows="last", tokens="uniform",
                                       random_state=2)
    assert Yl.shape == (10, 3) and np.abs(Xu).max() <= 1.0


@pytest.mark.parametrize("call, match", [
    (lambda L, X: attention_layer_output(X[0], L), r"shape \(n, N, d\).*X\[None\]"),
    (lambda L, X: attention_layer_output(X[..., :2], L), r"d = 3"),
    (lambda L, X: attention_layer_output(X, L, gate="G3"), r"Unknown gate 'G3'.*'key'"),
    (lambda L, X: attention_layer_output(X, L, gate_form="sigmoid"), r"Unknown gate_form"),
    (lambda L, X: attention_layer_output(X, L, rows="first"), r"Unknown rows"),
    (lambda L, X: attention_layer_output(X, L, activation="relu"), r"Unknown activation"),
    (lambda L, X: attention_layer_output(X, L, gate_form="multiplicative", gate="sdpa"),
     r"needs the gate's weights W_theta"),
    (lambda L, X: random_attention_layer(1, 3, 2, gate_form="multiplicative",
                                         granularity="channelwise"), r"Unknown granularity"),
    (lambda L, X: random_attention_layer(1, 3, 4), r"head_dim = 4 > d = 3.*qk='full'"),
    (lambda L, X: random_attention_layer(1, 3, 2, qk="low-rank"), r"Unknown qk"),
    (lambda L, X: attention_layer_output(X, random_attention_layer(1, 3, 2, qk="full"),
                                         gate="key"), r"qk='full'.*use qk='factored'"),
    (lambda L, X: attention_layer_output(
        X, random_attention_layer(1, 3, 2, gate_form="multiplicative"), gate="value"),
     r"use gate='sdpa'"),
    (lambda L, X: attention_layer_output(
        X, random_attention_layer(1, 3, 2, gate_form="multiplicative"), gate="sdpa",
        gate_form="activation"), r"use gate_form='multiplicative'"),
    (lambda L, X: AttentionLayer(W_V=L.W_V, W_O=L.W_O, W_Q=L.W_Q), r"either W_Q and W_K"),
    (lambda L, X: AttentionLayer(W_V=L.W_V, W_O=L.W_O[:, :1], W_Q=L.W_Q, W_K=L.W_K),
     r"W_O must have shape \(H, d_v, d_out\)"),
    (lambda L, X: LayerLayout(1, 3, 2, 3).unpack(np.zeros(5)), r"theta must have shape"),
    (lambda L, X: make_attention_regression(0, L, n_tokens=3), r"n must be an integer >= 1"),
])
def test_bad_input_says_what_to_change(call, match):
    layer = random_attention_layer(1, 3, 2, random_state=0)
    with pytest.raises(ValueError, match=match):
        call(layer, _tokens())
