"""The layer fit's method: variable projection of ``W_O`` (reduced gradient and Kaufman's
Gauss–Newton matrix against finite differences, fits against the full problem's, noiseless
recovery), gauge rebalancing, the ridge, input scaling, the memory check and the GN sums'
independence of the thread count."""

import numpy as np
import pytest

from hmoe_estim.kernels import layer_jacobian, layer_sums, numba_threads, single_thread_blas
from hmoe_estim.layer import (
    AttentionLayerRegressor,
    LayerProblem,
    attention_layer_output,
    make_attention_regression,
    random_attention_layer,
)
from hmoe_estim.layer._gauge import rebalance
from hmoe_estim.layer._scaling import check_layer_fit_size
from hmoe_estim.layer._varpro import VarProLayerProblem

# every gate and form linear in W_O: (gate, form of random_attention_layer)
LINEAR = [
    ("none", {}),
    ("value", {}),
    ("sdpa", {}),
    ("key", {}),
    ("query", {}),
    ("none", {"qk": "full", "fit_intercept": True}),
    ("sdpa", {"gate_form": "multiplicative", "granularity": "headwise"}),
    ("sdpa", {"gate_form": "multiplicative", "granularity": "elementwise"}),
]
_IDS = ["none", "value", "sdpa", "key", "query", "full+intercept", "mult-headwise",
        "mult-elementwise"]


def _problem(gate, form, n=30, noise=0.3, alpha=0.0, seed=0, kind=VarProLayerProblem):
    truth = random_attention_layer(2, 3, 2, d_out=2, random_state=seed, **form)
    X, Y = make_attention_regression(n, truth, n_tokens=3, gate=gate, noise=noise,
                                     random_state=seed + 1)
    lower, upper = LayerProblem.default_box(truth.layout)
    return truth, kind(X, Y, truth.layout, gate, "sigmoid", lower, upper, alpha=alpha)


@pytest.mark.parametrize("gate, form", LINEAR, ids=_IDS)
@pytest.mark.parametrize("alpha", [0.0, 1e-2])
def test_reduced_gradient_is_that_of_the_reduced_objective(gate, form, alpha):
    truth, problem = _problem(gate, form, alpha=alpha)
    beta = problem.beta(truth.layout.pack(truth)) + 0.2
    _, g = problem.objective_and_gradient(beta)
    h = 1e-6
    fd = np.array([(problem.objective_and_gradient(beta + h * e)[0]
                    - problem.objective_and_gradient(beta - h * e)[0]) / (2 * h)
                   for e in np.eye(beta.size)])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7 * np.abs(g).max())


@pytest.mark.parametrize("gate, form", LINEAR, ids=_IDS)
def test_reduced_gauss_newton_matrix_is_kaufmans(gate, form):
    """At a zero-residual point Kaufman's matrix is the Gauss–Newton matrix of the reduced
    residuals ``r(β) = [F(β, W̃(β)) − Y; penalty rows]``: ``J_rᵀJ_r`` by finite differences."""
    truth, problem = _problem(gate, form, noise=0.0)
    beta = problem.beta(truth.layout.pack(truth))
    passes = problem.passes()
    h = 1e-6
    Jr = np.empty((problem.y.size, beta.size))
    for p, e in enumerate(np.eye(beta.size)):
        Jr[:, p] = (passes.values(beta + h * e).copy() - passes.values(beta - h * e)) / (2 * h)
    A = passes.sums(beta, 0.0)[0]
    np.testing.assert_allclose(A, Jr.T @ Jr, rtol=1e-5, atol=1e-6 * np.abs(A).max())
    # the reduced residuals: the data's and the ridge's (S = values·values at y = 0 rows)
    r = passes.values(beta) - problem.y
    assert passes.sums(beta, 0.0)[2] == pytest.approx(float(r @ r), rel=1e-10, abs=1e-20)


@pytest.mark.parametrize("gate", ["none", "value", "sdpa"])
def test_varpro_fit_reaches_the_full_fits_objective(gate):
    truth = random_attention_layer(1, 2, 2, scale=1.5, random_state=0)
    X, Y = make_attention_regression(200, truth, n_tokens=3, gate=gate, noise=0.1,
                                     random_state=1)
    kw = dict(gate=gate, n_starts=2, random_state=0)
    vp = AttentionLayerRegressor(varpro=True, **kw).fit(X, Y)
    full = AttentionLayerRegressor(varpro=False, **kw).fit(X, Y)
    assert vp.varpro_ and not full.varpro_
    # the same optimum, up to where Levenberg–Marquardt stops: a decrease below 1% of
    # σ²/m per iteration is not pursued, so two searches end a few hundredths of σ²/m apart
    m = Y.size
    assert vp.objective_ <= full.objective_ + 0.1 * 0.1 ** 2 / m


@pytest.mark.parametrize("gate", ["none", "value", "sdpa"])
def test_noiseless_recovery_with_varpro(gate):
    truth = random_attention_layer(1, 2, 2, scale=1.5, random_state=0)
    X, Y = make_attention_regression(150, truth, n_tokens=3, gate=gate, random_state=1)
    est = AttentionLayerRegressor(gate=gate, varpro=True, n_starts=2, random_state=0).fit(X, Y)
    assert est.varpro_
    assert np.linalg.norm(est.P_ - truth.P_) < 1e-6
    assert np.linalg.norm(est.VO_ - truth.VO_) < 1e-6
    assert est.objective_ < 1e-18


def test_forward_passes_same_bits_on_one_and_two_threads():
    from hmoe_estim.kernels import layer_heads, layer_values

    truth = random_attention_layer(2, 3, 2, random_state=0)
    X, _ = make_attention_regression(700, truth, n_tokens=4, noise=0.1, random_state=1)
    theta = truth.layout.pack(truth)
    for gate in ("none", "sdpa"):
        args = truth.layout.kernel_args(gate, "sigmoid", "all")
        out = {}
        for k in (1, 2):  # 700·4·3 outputs: on two threads above SERIAL_SAMPLES
            with numba_threads(k):
                out[k] = (layer_values(theta, X, *args, np.empty(700 * 4 * 3)),
                          layer_heads(theta, X, *args, np.empty((700 * 4, 4))))
        for a, b in zip(out[1], out[2]):
            np.testing.assert_array_equal(a, b)
        Phi = out[1][1].reshape(700, 4, 4)
        if gate == "none":  # the output is Φ W_O
            W = truth.layout.unpack(theta).W_O.reshape(4, 3)
            np.testing.assert_allclose(out[1][0].reshape(700, 4, 3), Phi @ W, rtol=1e-12,
                                       atol=1e-12)


@pytest.mark.parametrize("H", [2, 1], ids=["per-output", "per-row"])
def test_gauss_newton_sums_same_bits_on_one_and_two_threads(H):
    truth = random_attention_layer(H, 3, 2, random_state=0)
    X, Y = make_attention_regression(700, truth, n_tokens=4, noise=0.1, random_state=1)
    args = truth.layout.kernel_args("value", "sigmoid", "all")
    theta = truth.layout.pack(truth) + 0.05
    one = layer_sums(theta, X, Y.ravel(), 0.0, *args, n_threads=1)
    two = layer_sums(theta, X, Y.ravel(), 0.0, *args, n_threads=2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    f, J = layer_jacobian(theta, X, *args)
    r = f - Y.ravel()
    np.testing.assert_allclose(one[0], J.T @ J, rtol=1e-12, atol=1e-12 * np.abs(one[0]).max())
    np.testing.assert_allclose(one[1], J.T @ r, rtol=1e-12, atol=1e-10)
    lower, upper = LayerProblem.default_box(truth.layout)
    problem = VarProLayerProblem(X, Y, truth.layout, "value", "sigmoid", lower, upper)
    beta = problem.beta(theta)
    with single_thread_blas():
        with numba_threads(1):
            s1 = problem.passes().sums(beta, 0.0)
        with numba_threads(2):
            s2 = problem.passes().sums(beta, 0.0)
    for a, b in zip(s1, s2):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("gate, form", LINEAR + [("output", {})], ids=_IDS + ["output"])
def test_rebalancing_keeps_the_function_and_balances_the_factors(gate, form):
    layer = random_attention_layer(2, 3, 2, d_out=2, random_state=0, **form)
    rng = np.random.default_rng(0)
    A = rng.normal(size=(2, 2)) * 5
    if layer.W_Q is not None and gate not in ("key", "query"):  # unbalance Q/K by a gauge
        layer.W_Q = layer.W_Q @ A
        layer.W_K = layer.W_K @ np.linalg.inv(A).T
    X = rng.normal(size=(20, 4, 3))
    kw = dict(gate=gate, gate_form=form.get("gate_form", "activation"))
    before = attention_layer_output(X, layer, **kw)
    new = rebalance(layer, gate)
    after = attention_layer_output(X, new, **kw)
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-12 * np.abs(before).max())
    np.testing.assert_allclose(new.P_, layer.P_, atol=1e-12)
    if new.W_Q is not None and gate not in ("key", "query"):
        np.testing.assert_allclose(np.einsum("hde,hdf->hef", new.W_Q, new.W_Q),
                                   np.einsum("hde,hdf->hef", new.W_K, new.W_K), atol=1e-12)
    general = gate in ("none", "output", "key", "query") \
        or form.get("granularity") == "headwise"
    if general:
        np.testing.assert_allclose(np.einsum("hde,hdf->hef", new.W_V, new.W_V),
                                   np.einsum("hec,hfc->hef", new.W_O, new.W_O), atol=1e-12)
    elif form.get("granularity") == "elementwise":
        np.testing.assert_allclose(np.linalg.norm(new.W_V, axis=1),
                                   np.linalg.norm(new.W_O, axis=2), atol=1e-12)
    else:  # a non-linearity between V and O: no gauge, nothing moves
        np.testing.assert_array_equal(new.W_V, layer.W_V)
        np.testing.assert_array_equal(new.W_O, layer.W_O)


@pytest.mark.parametrize("qk", ["factored", "full"])
def test_ridge_objective_and_gradient_of_the_full_problem(qk):
    truth, problem = _problem("sdpa", {"qk": qk, "fit_intercept": True}, alpha=0.05,
                              kind=LayerProblem)
    theta = truth.layout.pack(truth) + 0.1
    v, g = problem.objective_and_gradient(theta)
    w = problem.penalty_weights()
    assert w[-2:].sum() == 0 and w[:-2].min() == 1  # every weight, not the intercept
    v0 = LayerProblem(problem.X, problem.y.reshape(-1, 3, 2), problem.layout, "sdpa",
                      "sigmoid", problem.lower, problem.upper).objective_and_gradient(theta)[0]
    assert v == pytest.approx(v0 + 0.05 * float(w.dot(theta * theta)), rel=1e-13)
    h = 1e-6
    fd = [(problem.objective_and_gradient(theta + h * e)[0]
           - problem.objective_and_gradient(theta - h * e)[0]) / (2 * h)
          for e in np.eye(theta.size)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)


def test_ridge_fit_shrinks_and_both_methods_agree():
    truth = random_attention_layer(1, 2, 2, scale=1.5, random_state=0)
    X, Y = make_attention_regression(200, truth, n_tokens=3, gate="none", noise=0.1,
                                     random_state=1)
    kw = dict(n_starts=2, random_state=0)
    plain = AttentionLayerRegressor(**kw).fit(X, Y)
    vp = AttentionLayerRegressor(alpha=0.05, **kw).fit(X, Y)
    full = AttentionLayerRegressor(alpha=0.05, varpro=False, **kw).fit(X, Y)
    nuc = [np.linalg.norm(e.VO_[0], "nuc") for e in (plain, vp, full)]
    assert nuc[1] < nuc[0] and nuc[2] < nuc[0]
    # the same penalised objective, reached by both
    assert vp.objective_ == pytest.approx(full.objective_, rel=1e-5)
    resid = np.mean((vp.predict(X) - Y) ** 2)
    assert vp.objective_ > resid


@pytest.mark.parametrize("gate, fit_intercept", [("none", False), ("value", True),
                                                  ("output", True)])
def test_scaled_data_give_the_transformed_layer(gate, fit_intercept):
    truth = random_attention_layer(1, 2, 2, scale=1.5, random_state=0,
                                   fit_intercept=fit_intercept)
    X, Y = make_attention_regression(120, truth, n_tokens=3, gate=gate, noise=0.05,
                                     random_state=1)
    kw = dict(gate=gate, fit_intercept=fit_intercept, n_starts=1, max_iter=30,
              random_state=0)
    s = 1.0 if gate == "output" else 2.0 ** -8
    Ya = Y * s + (3.0 if fit_intercept else 0.0)
    a = AttentionLayerRegressor(**kw).fit(X * 2.0 ** 10, Ya)
    c, t = 2.0 ** 2, 1.0 if gate == "output" else 2.0 ** 3
    b = AttentionLayerRegressor(**kw).fit(X * 2.0 ** 10 * c, Ya * t)
    assert a.x_scale_ != 1.0 and b.x_scale_ == a.x_scale_ * c
    assert b.y_scale_ == a.y_scale_ * t
    np.testing.assert_allclose(b.P_, a.P_ / c ** 2, rtol=1e-12, atol=0)
    np.testing.assert_allclose(b.VO_, a.VO_ * t / c, rtol=1e-12, atol=0)
    np.testing.assert_allclose(b.intercept_, a.intercept_ * t, rtol=1e-12, atol=0)
    np.testing.assert_allclose(b.predict(X * 2.0 ** 10 * c), a.predict(X * 2.0 ** 10) * t,
                               rtol=1e-12, atol=1e-12)
    assert b.objective_ == pytest.approx(a.objective_ * t * t, rel=1e-12)


def test_a_fit_too_large_for_memory_is_refused(monkeypatch):
    layout = random_attention_layer(2, 4, 4, random_state=0).layout
    with pytest.raises(ValueError, match=r"GiB .*Use fewer samples"):
        check_layer_fit_size(10 ** 9, 16, 16, layout, True)
    check_layer_fit_size(10 ** 4, 4, 4, layout, True)
    monkeypatch.setattr("hmoe_estim.layer._scaling.MAX_FIT_BYTES", 1000)
    truth = random_attention_layer(1, 2, 2, random_state=0)
    X, Y = make_attention_regression(50, truth, n_tokens=3, random_state=1)
    with pytest.raises(ValueError, match=r"150 residuals|300 residuals"):
        AttentionLayerRegressor(n_starts=1).fit(X, Y)


@pytest.mark.parametrize("gate, expected", [("none", False), ("value", True), ("sdpa", True),
                                            ("key", True), ("output", False)])
def test_auto_uses_varpro_for_gated_layers_linear_in_w_o(gate, expected):
    truth = random_attention_layer(1, 2, 2, scale=1.5, random_state=0)
    X, Y = make_attention_regression(60, truth, n_tokens=2, gate=gate, noise=0.1,
                                     random_state=1)
    est = AttentionLayerRegressor(gate=gate, n_starts=1, random_state=0).fit(X, Y)
    assert est.varpro_ is expected
