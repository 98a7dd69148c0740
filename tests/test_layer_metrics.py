"""Gauge-invariant metrics of a whole attention layer (``hmoe_estim.layer``): each formula
against a plain-NumPy evaluation written here with loops; zero on the truth; invariance under
the Q/K and V/O gauges, channel permutations (and signs for tanh) and head relabelling; the
layer Voronoi loss reduces to the paper's per-entry loss for one column; the per-entry loss
aligned to the truth's gauge; the scorers in ``cross_validate``; bad input refused."""

import itertools
import pickle
import warnings

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV, cross_validate

from hmoe_estim.attention import attention_to_measure
from hmoe_estim.layer import (
    AttentionLayer,
    AttentionLayerRegressor,
    align_layer,
    attention_layer_output,
    entry_voronoi_loss,
    head_matching,
    layer_parameter_errors,
    layer_regression_error,
    layer_voronoi_loss,
    make_attention_regression,
    make_layer_scorer,
    random_attention_layer,
)
from hmoe_estim.metrics import regression_error, voronoi_loss

N = 3


# -- plain-NumPy references ---------------------------------------------------------------
def _act(activation, z):
    if activation == "sigmoid":
        return 1.0 / (1.0 + np.exp(-z))
    assert activation == "tanh"
    return np.tanh(z)


def _P(layer):
    """P_h by loops: W_Q W_Kᵀ / sqrt(d_v), or the free P."""
    if layer.P is not None:
        return layer.P.copy()
    H, d, dv = layer.W_Q.shape
    P = np.zeros((H, d, d))
    for h in range(H):
        for a in range(d):
            for b in range(d):
                P[h, a, b] = sum(layer.W_Q[h, a, e] * layer.W_K[h, b, e] for e in range(dv))
    return P / np.sqrt(dv)


def _C(layer):
    H, d, dv = layer.W_V.shape
    C = np.zeros((H, d, layer.W_O.shape[2]))
    for h in range(H):
        for e in range(dv):
            C[h] += np.outer(layer.W_V[h, :, e], layer.W_O[h, e])
    return C


def _softmax_rows(X, P):
    """S[s, i, j] = softmax_j(x_i P x_j) for every sample s."""
    n = X.shape[0]
    S = np.zeros((n, N, N))
    for s in range(n):
        for i in range(N):
            z = np.array([X[s, i] @ P @ X[s, j] for j in range(N)])
            z = np.exp(z - z.max())
            S[s, i] = z / z.sum()
    return S


def _ref_output(X, layer, gate, activation):
    P = _P(layer)
    n = X.shape[0]
    out = np.zeros((n, N, layer.W_O.shape[2]))
    for h in range(layer.W_V.shape[0]):
        S = _softmax_rows(X, P[h])
        V = X @ layer.W_V[h]  # (n, N, d_v)
        if gate == "value":
            V = _act(activation, V)
        head = np.zeros_like(V)
        for s in range(n):
            head[s] = S[s] @ V[s]
        if gate == "sdpa":
            head = _act(activation, head)
        out += head @ layer.W_O[h]
    if gate == "output":
        out = _act(activation, out)
    return out


def _branches(X, layer, gate, activation):
    """B[s, i, h, k] = Σ_j S_h[i, j] e_{h,k}(x_j)."""
    P = _P(layer)
    H, _, K = layer.W_V.shape
    B = np.zeros((X.shape[0], N, H, K))
    for h in range(H):
        S = _softmax_rows(X, P[h])
        for k in range(K):
            e = X @ layer.W_V[h, :, k]
            if gate == "value":
                e = _act(activation, e)
            for i in range(N):
                B[:, i, h, k] = np.sum(S[:, i, :] * e, axis=1)
    return B


def _entry_atoms(P_h, w, row):
    """The entry's gate matrices M_j = sym(J_rowᵀ P J_j) (D×D) and experts a_j = J_jᵀ w."""
    d = w.shape[0]
    D = N * d
    M, a = np.zeros((N, D, D)), np.zeros((N, D))
    for j in range(N):
        M[j, row * d:(row + 1) * d, j * d:(j + 1) * d] += P_h / 2
        M[j, j * d:(j + 1) * d, row * d:(row + 1) * d] += P_h.T / 2
        a[j, j * d:(j + 1) * d] = w
    return M, a


def _atom_cost(P_fit, w_fit, P_true, w_true, row, e):
    """min over token permutations π of Σ_i ‖ΔM_i‖_F^e + ‖Δa_i‖^e, gauge-fixed at the last
    true token: ΔM_i = (M_π(i) − M_π(N−1)) − (M*_i − M*_{N−1})."""
    Mf, af = _entry_atoms(P_fit, w_fit, row)
    Mt, at = _entry_atoms(P_true, w_true, row)
    best = np.inf
    for perm in itertools.permutations(range(N)):
        cost = 0.0
        for i in range(N):
            dM = (Mf[perm[i]] - Mf[perm[N - 1]]) - (Mt[i] - Mt[N - 1])
            cost += np.sqrt(np.sum(dM * dM)) ** e + np.linalg.norm(af[perm[i]] - at[i]) ** e
        best = min(best, cost)
    return best


def _ref_layer_voronoi(fit, true, X, gate, activation, r, rows):
    B, Bs = _branches(X, fit, gate, activation), _branches(X, true, gate, activation)
    Pf, Pt = _P(fit), _P(true)
    H, _, K = fit.W_V.shape
    Hs, _, Ks = true.W_V.shape
    signed = activation == "tanh"
    losses = []
    for i in (range(N) if rows == "all" else [N - 1]):
        cell, sign = {}, {}
        for hp in range(H):
            for kp in range(K):
                best = (np.inf, None, 1)
                for h in range(Hs):
                    for k in range(Ks):
                        dist = np.sqrt(np.mean((B[:, i, hp, kp] - Bs[:, i, h, k]) ** 2))
                        s = 1
                        if signed:
                            flip = np.sqrt(np.mean((-B[:, i, hp, kp] - Bs[:, i, h, k]) ** 2))
                            if flip < dist:
                                dist, s = flip, -1
                        if dist < best[0]:
                            best = (dist, (h, k), s)
                cell[hp, kp], sign[hp, kp] = best[1], best[2]
        loss = 0.0
        for h in range(Hs):
            for k in range(Ks):
                members = [m for m in cell if cell[m] == (h, k)]
                e = r if r is not None else (1 if len(members) == 1 else 2)
                total = np.zeros(true.W_O.shape[2])
                for hp, kp in members:
                    s = sign[hp, kp]
                    total += s * fit.W_O[hp, kp]
                    loss += np.linalg.norm(fit.W_O[hp, kp]) * _atom_cost(
                        Pf[hp], s * fit.W_V[hp, :, kp], Pt[h], true.W_V[h, :, k], i, e)
                loss += np.linalg.norm(total - true.W_O[h, k])
        losses.append(loss)
    return float(np.mean(losses))


# -- layers and gauges --------------------------------------------------------------------
def _layer(seed, H=2, d=2, dv=2, d_out=2, **kw):
    return random_attention_layer(H, d, dv, d_out, scale=1.5, random_state=seed, **kw)


def _tokens(n=60, seed=5, d=2):
    return np.random.default_rng(seed).normal(size=(n, N, d))


def _gauge(layer, seed, *, qk=True, vo=True):
    """A copy under random invertible A (Q/K) and B (V/O) per head: the same function."""
    rng = np.random.default_rng(seed)
    H, d, dv = layer.W_V.shape
    W_Q, W_K = layer.W_Q.copy(), layer.W_K.copy()
    W_V, W_O = layer.W_V.copy(), layer.W_O.copy()
    for h in range(H):
        A = rng.normal(size=(dv, dv)) + 2 * np.eye(dv)
        B = rng.normal(size=(dv, dv)) + 2 * np.eye(dv)
        if qk:
            W_Q[h], W_K[h] = W_Q[h] @ A, W_K[h] @ np.linalg.inv(A).T
        if vo:
            W_V[h], W_O[h] = W_V[h] @ B, np.linalg.inv(B) @ W_O[h]
    return AttentionLayer(W_V=W_V, W_O=W_O, W_Q=W_Q, W_K=W_K)


def _relabel(layer, heads=None, channels=None, signs=None):
    """Heads permuted, channels permuted (the same in every head) and signs flipped."""
    H, _, dv = layer.W_V.shape
    heads = np.arange(H) if heads is None else np.asarray(heads)
    ch = np.arange(dv) if channels is None else np.asarray(channels)
    sg = np.ones(dv) if signs is None else np.asarray(signs, dtype=float)
    kw = dict(W_V=layer.W_V[heads][:, :, ch] * sg, W_O=layer.W_O[heads][:, ch] * sg[:, None])
    if layer.P is not None:
        kw["P"] = layer.P[heads]
    else:
        kw.update(W_Q=layer.W_Q[heads], W_K=layer.W_K[heads])
    return AttentionLayer(**kw)


def _full(layer):
    return AttentionLayer(W_V=layer.W_V, W_O=layer.W_O, P=_P(layer))


# -- regression error ---------------------------------------------------------------------
@pytest.mark.parametrize("gate", ["none", "value", "sdpa", "output"])
@pytest.mark.parametrize("rows", ["all", "last"])
def test_regression_error_against_loops(gate, rows):
    fit, true = _layer(1), _layer(2)
    X = _tokens(20)
    diff = _ref_output(X, fit, gate, "tanh") - _ref_output(X, true, gate, "tanh")
    if rows == "last":
        diff = diff[:, -1]
    expected = np.sqrt(np.mean(diff ** 2))
    got = layer_regression_error(fit, true, X, gate=gate, activation="tanh", rows=rows)
    assert got == pytest.approx(expected, rel=1e-10)
    assert layer_regression_error(true, true, X, gate=gate, activation="tanh") == 0.0
    assert layer_regression_error(_relabel(fit, heads=[1, 0]), true, X, gate=gate,
                                  activation="tanh", rows=rows) == pytest.approx(got)


def test_regression_error_default_sample_and_one_entry():
    fit, true = _layer(1, d_out=1), _layer(2, d_out=1)
    X = np.random.default_rng(0).normal(size=(50, N, 2))
    assert layer_regression_error(fit, true, gate="value", n_tokens=N, n_ref=50) == \
        layer_regression_error(fit, true, X, gate="value")
    # d_out = 1, last row: the per-entry regression error of the entry measures
    W_O = lambda lay: np.concatenate([lay.W_O, np.zeros_like(lay.W_O)], axis=2)  # noqa: E731
    G = attention_to_measure(fit.W_Q, fit.W_K, fit.W_V, W_O(fit), n_tokens=N, row=N - 1,
                             column=0)
    Gs = attention_to_measure(true.W_Q, true.W_K, true.W_V, W_O(true), n_tokens=N,
                              row=N - 1, column=0)
    assert layer_regression_error(fit, true, X, gate="value", rows="last") == pytest.approx(
        regression_error(G, Gs, gate="value", X_ref=X.reshape(50, -1)), rel=1e-10)


# -- head matching, P and C errors --------------------------------------------------------
def test_parameter_errors_against_brute_force():
    fit, true = _layer(3, H=3, d=3, dv=2), _layer(4, H=3, d=3, dv=3)
    Pf, Pt, Cf, Ct = _P(fit), _P(true), _C(fit), _C(true)
    p = np.mean([np.sum(Pt[h] ** 2) for h in range(3)])
    c = np.mean([np.sum(Ct[h] ** 2) for h in range(3)])
    best = min(itertools.permutations(range(3)), key=lambda perm: sum(
        np.sum((Pf[perm[h]] - Pt[h]) ** 2) / p + np.sum((Cf[perm[h]] - Ct[h]) ** 2) / c
        for h in range(3)))
    res = layer_parameter_errors(fit, true)
    np.testing.assert_array_equal(res.heads, best)
    np.testing.assert_array_equal(head_matching(fit, true), best)
    for h in range(3):
        eP = np.sqrt(np.sum((Pf[best[h]] - Pt[h]) ** 2))
        eC = np.sqrt(np.sum((Cf[best[h]] - Ct[h]) ** 2))
        assert res.P_errors[h] == pytest.approx(eP)
        assert res.VO_errors[h] == pytest.approx(eC)
        assert res.P_relative_errors[h] == pytest.approx(eP / np.sqrt(np.sum(Pt[h] ** 2)))
        assert res.VO_relative_errors[h] == pytest.approx(eC / np.sqrt(np.sum(Ct[h] ** 2)))
    assert res.P_error == pytest.approx(np.sqrt(np.sum(res.P_errors ** 2)))
    assert res.VO_error == pytest.approx(np.sqrt(np.sum(res.VO_errors ** 2)))
    assert res.P_relative_error == pytest.approx(res.P_error / np.sqrt(np.sum(Pt ** 2)))
    assert res.VO_relative_error == pytest.approx(res.VO_error / np.sqrt(np.sum(Ct ** 2)))
    assert set(res.to_dict()) >= {"heads", "P_error", "VO_error"}


def test_parameter_errors_zero_under_gauges_and_relabelling():
    true = _layer(5, H=3, d=3, dv=2, d_out=2)
    moved = _relabel(_gauge(true, 0), heads=[2, 0, 1])
    res = layer_parameter_errors(moved, true)
    np.testing.assert_array_equal(res.heads, [1, 2, 0])
    assert res.P_error < 1e-12 and res.VO_error < 1e-12
    # full Q/K against factored: the same P
    res = layer_parameter_errors(_full(moved), true)
    assert res.P_error < 1e-12 and res.VO_error < 1e-12
    assert layer_parameter_errors(true, true).P_relative_error == 0.0


# -- layer Voronoi loss -------------------------------------------------------------------
@pytest.mark.parametrize("gate,activation,r,rows,H", [
    ("value", "sigmoid", None, "last", 2),
    ("sdpa", "tanh", None, "all", 2),
    ("sdpa", "sigmoid", 1, "last", 2),
    ("value", "tanh", 2, "last", 2),
    ("sdpa", "sigmoid", None, "all", 1),
])
def test_layer_voronoi_loss_against_loops(gate, activation, r, rows, H):
    # H = 2: over-specified, 2 fitted heads of 2 channels around 1 true head of 2 channels
    fit, true = _layer(6, H=H, dv=2), _layer(7, H=1, dv=2)
    X = _tokens(40)
    got = layer_voronoi_loss(fit, true, gate=gate, activation=activation, r=r, X=X,
                             rows=rows)
    expected = _ref_layer_voronoi(fit, true, X, gate, activation, r, rows)
    assert got == pytest.approx(expected, rel=1e-10)
    det = layer_voronoi_loss(fit, true, gate=gate, activation=activation, r=r, X=X,
                             rows=rows, return_details=True)
    assert float(det) == got
    np.testing.assert_allclose(det.row_losses, det.weight_parts + det.atom_parts)


def _entry(layer, row, column):
    """attention_to_measure of entry (row, column): W_O padded to (H, d_v, d)."""
    H, d, dv = layer.W_V.shape
    W_O = np.zeros((H, dv, d))
    W_O[:, :, : layer.W_O.shape[2]] = layer.W_O
    return attention_to_measure(layer.W_Q, layer.W_K, layer.W_V, W_O, n_tokens=N, row=row,
                                column=column)


@pytest.mark.parametrize("gate,activation", [("value", "sigmoid"), ("sdpa", "tanh")])
def test_layer_voronoi_loss_reduces_to_the_entry_loss(gate, activation):
    """d_out = 1: the loss of row i is voronoi_loss of the entry measures of (i, 0) on the
    same reference sample; rows='last' is the last entry's, rows='all' the entries' mean."""
    fit, true = _layer(8, H=2, dv=2, d_out=1), _layer(9, H=1, dv=2, d_out=1)
    X = _tokens(40)
    per_entry = [voronoi_loss(_entry(fit, i, 0), _entry(true, i, 0), gate=gate,
                              activation=activation, X_ref=X.reshape(40, -1))
                 for i in range(N)]
    kw = dict(gate=gate, activation=activation, X=X)
    assert layer_voronoi_loss(fit, true, rows="last", **kw) == pytest.approx(per_entry[-1],
                                                                              rel=1e-12)
    assert layer_voronoi_loss(fit, true, rows="all", **kw) == pytest.approx(
        np.mean(per_entry), rel=1e-12)
    # full Q/K: the same atoms
    assert layer_voronoi_loss(_full(fit), _full(true), rows="last", **kw) == pytest.approx(
        per_entry[-1], rel=1e-12)


def test_layer_voronoi_loss_between_column_losses():
    """d_out = 2: max_c L(c) <= L <= Σ_c L(c) over the per-entry losses of the columns."""
    fit, true = _layer(10, H=2, dv=2, d_out=2), _layer(11, H=2, dv=2, d_out=2)
    X = _tokens(40)
    L = layer_voronoi_loss(fit, true, gate="value", X=X, rows="last")
    cols = [voronoi_loss(_entry(fit, N - 1, c), _entry(true, N - 1, c), gate="value",
                         X_ref=X.reshape(40, -1)) for c in range(2)]
    assert max(cols) <= L + 1e-12 and L <= sum(cols) + 1e-12


@pytest.mark.parametrize("gate", ["value", "sdpa"])
def test_layer_voronoi_loss_zero_and_invariances(gate):
    true, fit = _layer(12, H=2, dv=2), _layer(13, H=2, dv=2)
    X = _tokens(40)
    kw = dict(gate=gate, X=X, rows="all")
    assert layer_voronoi_loss(true, true, activation="tanh", **kw) == 0.0
    qk_moved = _gauge(true, 1, vo=False)
    assert layer_voronoi_loss(qk_moved, true, activation="sigmoid", **kw) < 1e-10
    base = layer_voronoi_loss(fit, true, activation="sigmoid", **kw)
    relabelled = _relabel(_gauge(fit, 2, vo=False), heads=[1, 0], channels=[1, 0])
    assert layer_voronoi_loss(relabelled, true, activation="sigmoid", **kw) == \
        pytest.approx(base, rel=1e-10)
    # tanh: a channel's sign flip (o, w) -> (-o, -w) is a symmetry, quotiented
    flipped = _relabel(true, signs=[-1, 1])
    assert layer_voronoi_loss(flipped, true, activation="tanh", **kw) < 1e-10
    assert layer_voronoi_loss(flipped, true, activation="sigmoid", **kw) > 0.1


@pytest.mark.parametrize("gate", ["none", "output", "key", "query"])
def test_layer_voronoi_loss_refuses_gates_with_v_o_gauge(gate):
    with pytest.raises(ValueError, match="G1 .*G2"):
        layer_voronoi_loss(_layer(1), _layer(2), gate=gate, n_tokens=N, n_ref=8)


def test_layer_voronoi_loss_refuses_multiplicative_gate():
    fit = _layer(1, gate_form="multiplicative")
    true = _layer(2, gate_form="multiplicative")
    with pytest.raises(ValueError, match="multiplicative"):
        layer_voronoi_loss(fit, true, gate="sdpa", n_tokens=N, n_ref=8)


# -- alignment and per-entry losses ------------------------------------------------------
def test_entry_voronoi_loss_is_the_entry_measures_loss():
    fit, true = _layer(14), _layer(15)
    X = _tokens(40)
    got = entry_voronoi_loss(fit, true, 1, 1, gate="sdpa", activation="tanh", X=X, r=1)
    expected = voronoi_loss(_entry(fit, 1, 1), _entry(true, 1, 1), gate="sdpa",
                            activation="tanh", r=1, X_ref=X.reshape(40, -1))
    assert float(got) == pytest.approx(expected, rel=1e-12)
    assert not got.aligned_to_truth and got.label == "entry_voronoi_loss"
    assert (got.row, got.column) == (1, 1)


def test_entry_voronoi_loss_aligned_to_the_truths_gauge():
    true = _layer(16, H=2, d=3, dv=2)
    moved = _relabel(_gauge(true, 3), heads=[1, 0])
    kw = dict(gate="none", n_tokens=N, n_ref=64)
    raw = entry_voronoi_loss(moved, true, N - 1, 0, **kw)
    aligned = entry_voronoi_loss(moved, true, N - 1, 0, align=True, **kw)
    assert float(raw) > 0.1
    assert float(entry_voronoi_loss(true, true, N - 1, 0, **kw)) == 0.0
    assert float(aligned) < 1e-8
    assert aligned.aligned_to_truth and "uses the truth" in aligned.label


def test_align_layer_recovers_the_truths_weights():
    X = _tokens(10, d=3)
    # GL (MHA): any invertible B per head
    true = _layer(17, H=2, d=3, dv=2)
    moved = _relabel(_gauge(true, 4, qk=False), heads=[1, 0])
    al = align_layer(moved, true, gate="none")
    np.testing.assert_allclose(al.W_V, true.W_V, atol=1e-10)
    np.testing.assert_allclose(al.W_O, true.W_O, atol=1e-10)
    # headwise multiplicative gate: GL too, the function unchanged
    true_hw = _layer(19, H=1, d=3, dv=2, gate_form="multiplicative")
    B = np.array([[2.0, 1.0], [0.5, -1.0]])
    moved = AttentionLayer(W_Q=true_hw.W_Q, W_K=true_hw.W_K, W_V=true_hw.W_V @ B,
                           W_O=np.linalg.inv(B) @ true_hw.W_O, W_theta=true_hw.W_theta)
    al = align_layer(moved, true_hw, gate="sdpa")
    np.testing.assert_allclose(al.W_V, true_hw.W_V, atol=1e-10)
    np.testing.assert_allclose(al.W_O, true_hw.W_O, atol=1e-10)
    np.testing.assert_allclose(attention_layer_output(X, al, gate="sdpa"),
                               attention_layer_output(X, moved, gate="sdpa"), atol=1e-12)
    # G1 with tanh: channel permutation and signs
    moved = _relabel(true, heads=[1, 0], channels=[1, 0], signs=[-1, 1])
    al = align_layer(moved, true, gate="sdpa", activation="tanh")
    np.testing.assert_allclose(al.W_V, true.W_V, atol=1e-12)
    np.testing.assert_allclose(al.W_O, true.W_O, atol=1e-12)
    np.testing.assert_allclose(attention_layer_output(X, al, gate="sdpa", activation="tanh"),
                               attention_layer_output(X, true, gate="sdpa",
                                                      activation="tanh"), atol=1e-12)
    # elementwise multiplicative gate: permutation and diagonal scale (W_θ permuted along)
    true = _layer(18, H=1, d=3, dv=2, gate_form="multiplicative", granularity="elementwise")
    moved = AttentionLayer(W_Q=true.W_Q, W_K=true.W_K, W_V=true.W_V[:, :, ::-1] * [2.0, -0.5],
                           W_O=true.W_O[:, ::-1] / np.array([2.0, -0.5])[:, None],
                           W_theta=true.W_theta[:, :, ::-1])
    al = align_layer(moved, true, gate="sdpa")
    np.testing.assert_allclose(al.W_V, true.W_V, atol=1e-12)
    np.testing.assert_allclose(al.W_O, true.W_O, atol=1e-12)
    np.testing.assert_allclose(al.W_theta, true.W_theta, atol=1e-12)


# -- scorers ------------------------------------------------------------------------------
def test_scorers_in_cross_validate():
    true = random_attention_layer(1, 2, 2, scale=1.5, random_state=0)
    X, Y = make_attention_regression(60, true, n_tokens=N, gate="sdpa", noise=0.05,
                                     random_state=1)
    scoring = {
        "reg": make_layer_scorer("regression_error", true, n_ref=32),
        "P": make_layer_scorer("P_error", true),
        "VO": make_layer_scorer("VO_relative_error", true),
        "vor": make_layer_scorer("voronoi_loss", true, n_ref=32),
        "entry": make_layer_scorer("entry_voronoi_loss", true, row=N - 1, column=0,
                                   align=True, n_ref=32),
    }
    est = AttentionLayerRegressor(gate="sdpa", n_starts=1, max_iter=15, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = cross_validate(est, X, Y, cv=2, scoring=scoring, return_estimator=True)
    for name in scoring:
        assert np.all(np.isfinite(res[f"test_{name}"])) and np.all(res[f"test_{name}"] <= 0)
    fitted = res["estimator"][0]
    assert res["test_P"][0] == -layer_parameter_errors(fitted, true).P_error
    assert res["test_vor"][0] == -layer_voronoi_loss(fitted, true, n_ref=32)
    assert scoring["entry"].name == "entry_voronoi_loss_aligned (uses the truth)"
    assert pickle.loads(pickle.dumps(scoring["vor"]))(fitted) == res["test_vor"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search = GridSearchCV(est, {"max_iter": [5, 15]}, cv=2, scoring=scoring["VO"],
                              refit=False).fit(X, Y)
    assert np.all(search.cv_results_["mean_test_score"] <= 0)
    # the estimator's own names are used; a contradicting one is refused
    with pytest.raises(ValueError, match="fitted with gate='sdpa'"):
        layer_voronoi_loss(fitted, true, gate="value", n_ref=8)


def test_scorer_bad_input():
    true = _layer(1)
    with pytest.raises(ValueError, match="Unknown layer metric"):
        make_layer_scorer("L2", true)
    with pytest.raises(ValueError, match="read from the fitted estimator"):
        make_layer_scorer("voronoi_loss", true, gate="sdpa")
    with pytest.raises(ValueError, match="takes no argument"):
        make_layer_scorer("P_error", true, n_ref=8)
    with pytest.raises(ValueError, match="row=... and column"):
        make_layer_scorer("entry_voronoi_loss", true, row=0)
    with pytest.raises(ValueError, match="AttentionLayerRegressor"):
        make_layer_scorer("P_error", true)(object())


# -- bad input ----------------------------------------------------------------------------
def test_bad_input_says_what_to_fix():
    true = _layer(1, d=2, d_out=2)
    with pytest.raises(ValueError, match="d = 3.*d = 2"):
        layer_regression_error(_layer(2, d=3, d_out=2), true, gate="none", n_tokens=N)
    with pytest.raises(ValueError, match="d_out = 1"):
        layer_parameter_errors(_layer(2, d_out=1), true)
    with pytest.raises(ValueError, match="n_heads=2"):
        head_matching(_layer(2, H=1), true)
    with pytest.raises(ValueError, match="head_dim=2"):
        align_layer(_layer(2, dv=1), true, gate="none")
    with pytest.raises(ValueError, match="Unknown gate"):
        layer_regression_error(_layer(2), true, gate="G1", n_tokens=N)
    with pytest.raises(ValueError, match="gate is needed"):
        layer_regression_error(_layer(2), true, n_tokens=N)
    with pytest.raises(ValueError, match="n_tokens"):
        layer_voronoi_loss(_layer(2), true, gate="value")
    with pytest.raises(ValueError, match="true_layer must be an AttentionLayer"):
        layer_parameter_errors(_layer(2), true.W_V)
    with pytest.raises(ValueError, match="row must be"):
        entry_voronoi_loss(_layer(2), true, N, 0, gate="none", n_tokens=N, n_ref=8)
    with pytest.raises(ValueError, match="HMoE"):
        entry_voronoi_loss(_layer(2), true, 0, 0, gate="key", n_tokens=N, n_ref=8)
    with pytest.raises(ValueError, match="permutation"):
        layer_parameter_errors(_layer(2), true, heads=[0, 0])
