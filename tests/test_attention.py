"""Tests of hmoe_estim.attention: the direct (gated) attention pass and its HMoE measure."""

import numpy as np
import pytest

from hmoe_estim import MixingMeasure, regression_function
from hmoe_estim.attention import attention_to_measure, multihead_attention

from .reference import f_ref, phi_ref

GATES = ("none", "value", "sdpa", "output")
SHAPES = [(1, 2, 2, 2), (2, 3, 2, 3), (3, 4, 3, 2)]  # (H, N, d, d_v)
RTOL = 1e-10


def attention_loop(X, W_Q, W_K, W_V, W_O, gate="none", activation="sigmoid"):
    """Independent plain-NumPy forward pass, one head at a time, one softmax row at a time."""
    H, d, d_v = W_Q.shape
    N = X.shape[0]
    out = np.zeros((N, d))
    for h in range(H):
        Q = X @ W_Q[h]
        K = X @ W_K[h]
        V = X @ W_V[h]
        if gate == "value":
            V = phi_ref(activation, V)
        head = np.zeros((N, d_v))
        for i in range(N):
            s = np.array([Q[i] @ K[j] for j in range(N)]) / np.sqrt(d_v)
            w = np.exp(s - s.max())
            w = w / w.sum()
            head[i] = sum(w[j] * V[j] for j in range(N))
        if gate == "sdpa":
            head = phi_ref(activation, head)
        out += head @ W_O[h]
    if gate == "output":
        out = phi_ref(activation, out)
    return out


def random_weights(H, N, d, d_v, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    W_Q, W_K, W_V = rng.normal(scale=scale, size=(3, H, d, d_v))
    W_O = rng.normal(scale=scale, size=(H, d_v, d))
    X = rng.normal(size=(N, d))
    return X, W_Q, W_K, W_V, W_O


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("activation", ["sigmoid", "tanh", "gelu", "silu"])
def test_direct_pass_matches_loop(shape, gate, activation):
    X, W_Q, W_K, W_V, W_O = random_weights(*shape, seed=1)
    got = multihead_attention(X, W_Q, W_K, W_V, W_O, gate=gate, activation=activation)
    want = attention_loop(X, W_Q, W_K, W_V, W_O, gate, activation)
    assert got.shape == X.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def test_gates_differ():
    # guards against a gate switch that silently does nothing
    X, W_Q, W_K, W_V, W_O = random_weights(2, 3, 2, 3, seed=2)
    outs = [multihead_attention(X, W_Q, W_K, W_V, W_O, gate=g) for g in GATES]
    for p in range(len(outs)):
        for q in range(p + 1, len(outs)):
            assert not np.allclose(outs[p], outs[q])


def test_batch():
    X, W_Q, W_K, W_V, W_O = random_weights(2, 3, 2, 3, seed=3)
    rng = np.random.default_rng(0)
    XB = rng.normal(size=(4, 3, 2))
    for gate in GATES:
        got = multihead_attention(XB, W_Q, W_K, W_V, W_O, gate=gate)
        assert got.shape == (4, 3, 2)
        for b in range(4):
            np.testing.assert_allclose(
                got[b], multihead_attention(XB[b], W_Q, W_K, W_V, W_O, gate=gate),
                rtol=1e-13, atol=1e-13,
            )


def test_single_head_single_token():
    # N = 1: softmax weight 1, so MHA = X W_V W_O exactly
    X, W_Q, W_K, W_V, W_O = random_weights(1, 1, 3, 2, seed=4)
    np.testing.assert_allclose(multihead_attention(X, W_Q, W_K, W_V, W_O), X @ W_V[0] @ W_O[0])


def test_softmax_stable_for_large_scores():
    X, W_Q, W_K, W_V, W_O = random_weights(2, 3, 2, 2, seed=5)
    out = multihead_attention(1e3 * X, W_Q, W_K, W_V, W_O, gate="sdpa")
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_every_entry_is_an_hmoe(shape, seed):
    """The identity of the paper's Section 2: entry (row, column) == f_G(vec X), all gates."""
    H, N, d, d_v = shape
    X, W_Q, W_K, W_V, W_O = random_weights(H, N, d, d_v, seed=seed)
    x = X.reshape(1, -1)
    for activation in ("sigmoid", "gelu"):
        for gate in GATES:
            direct = attention_loop(X, W_Q, W_K, W_V, W_O, gate, activation)
            scale = max(1.0, np.abs(direct).max())
            for row in range(N):
                for column in range(d):
                    G = attention_to_measure(W_Q, W_K, W_V, W_O, n_tokens=N, row=row,
                                             column=column)
                    hmoe = regression_function(G, x, gate=gate, activation=activation)[0]
                    assert abs(hmoe - direct[row, column]) <= RTOL * scale, (gate, row, column)
                    # and the HMoE formula evaluated independently of the package's kernel
                    ref = f_ref(G.omega, G.M, G.a, x, gate, activation)[0]
                    assert abs(ref - direct[row, column]) <= RTOL * scale, (gate, row, column)


def test_measure_structure():
    H, N, d, d_v = 2, 3, 2, 3
    X, W_Q, W_K, W_V, W_O = random_weights(H, N, d, d_v, seed=6)
    row, column = 1, 0
    G = attention_to_measure(W_Q, W_K, W_V, W_O, n_tokens=N, row=row, column=column)
    assert isinstance(G, MixingMeasure)
    assert G.shape == (H, N, d_v, N * d)
    assert G.is_normalized()
    np.testing.assert_array_equal(G.M, np.swapaxes(G.M, 2, 3))
    np.testing.assert_array_equal(G.omega, W_O[:, :, column])
    x = X.reshape(-1)
    for h in range(H):
        P = W_Q[h] @ W_K[h].T / np.sqrt(d_v)
        scores = X[row] @ P @ X.T  # one row of the attention logits
        for j in range(N):
            # x^T M[h, j] x equals the logit up to the normalising shift of token N-1
            np.testing.assert_allclose(x @ G.M[h, j] @ x, scores[j] - scores[N - 1],
                                       atol=1e-12)
            for k in range(d_v):
                np.testing.assert_allclose(G.a[h, j, k] @ x, X[j] @ W_V[h][:, k], atol=1e-12)
                # the expert only reads token j
                mask = np.ones(N * d, bool)
                mask[j * d:(j + 1) * d] = False
                assert np.all(G.a[h, j, k][mask] == 0)


def _bad_weights():
    X, W_Q, W_K, W_V, W_O = random_weights(2, 3, 2, 3, seed=7)
    return X, W_Q, W_K, W_V, W_O


@pytest.mark.parametrize(
    "which, bad, match",
    [
        ("W_Q", lambda W: W[0], r"W_Q must have shape \(H, d, d_v\)"),
        ("W_K", lambda W: W[:, :, :2], r"W_K must have shape \(H, d, d_v\) = \(2, 2, 3\)"),
        ("W_V", lambda W: W[:1], r"W_V must have shape"),
        ("W_O", lambda W: np.swapaxes(W, 1, 2), r"W_O must have shape \(H, d_v, d\) = \(2, 3, 2\)"),
        ("W_O", lambda W: np.full_like(W, np.nan), "NaN"),
    ],
)
def test_bad_weight_shapes(which, bad, match):
    X, W_Q, W_K, W_V, W_O = _bad_weights()
    weights = dict(W_Q=W_Q, W_K=W_K, W_V=W_V, W_O=W_O)
    weights[which] = bad(weights[which])
    with pytest.raises(ValueError, match=match):
        multihead_attention(X, **weights)
    with pytest.raises(ValueError, match=match):
        attention_to_measure(**weights, n_tokens=3, row=0, column=0)


@pytest.mark.parametrize(
    "X, match",
    [
        (np.ones((3, 4)), r"X must have shape \(N, d\) or \(B, N, d\) with d = 2"),
        (np.ones(6), r"X must have shape"),
        (np.ones((1, 1, 3, 2)), r"X must have shape"),
        (np.full((3, 2), np.inf), "NaN or infinite"),
    ],
)
def test_bad_tokens(X, match):
    _, W_Q, W_K, W_V, W_O = _bad_weights()
    with pytest.raises(ValueError, match=match):
        multihead_attention(X, W_Q, W_K, W_V, W_O)


def test_bad_gate_activation():
    X, W_Q, W_K, W_V, W_O = _bad_weights()
    with pytest.raises(ValueError, match="Unknown gate"):
        multihead_attention(X, W_Q, W_K, W_V, W_O, gate="G1")
    with pytest.raises(ValueError, match="Unknown activation"):
        multihead_attention(X, W_Q, W_K, W_V, W_O, gate="value", activation="relu")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_tokens=3, row=3, column=0), r"row must be in \[0, 2\]"),
        (dict(n_tokens=3, row=-1, column=0), r"row must be in \[0, 2\]"),
        (dict(n_tokens=3, row=0, column=2), r"column must be in \[0, 1\]"),
        (dict(n_tokens=3, row=0.0, column=0), "row must be an integer"),
        (dict(n_tokens=0, row=0, column=0), "n_tokens"),
        (dict(n_tokens=2.5, row=0, column=0), "n_tokens"),
    ],
)
def test_bad_indices(kwargs, match):
    _, W_Q, W_K, W_V, W_O = _bad_weights()
    with pytest.raises(ValueError, match=match):
        attention_to_measure(W_Q, W_K, W_V, W_O, **kwargs)
