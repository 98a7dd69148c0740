"""Estimator options for real data: fit_intercept, positive_weights=False, alpha; and the
warning after a fit that is worse than the mean."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.utils.estimator_checks import parametrize_with_checks

from hmoe_estim import (
    G1Regressor,
    G2Regressor,
    HMoERegressor,
    MHARegressor,
    MixingMeasure,
    regression_function,
)
from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES, GATES
from hmoe_estim.estimators import PoorFitWarning
from hmoe_estim.kernels.objective import BLOCK, objective_and_gradient
from hmoe_estim.model import make_bounds, n_params, pack, triangle_indices, unpack

from .reference import f_ref, fd_gradient, random_arrays

OPTIONS = [
    dict(fit_intercept=True),
    dict(positive_weights=False),
    dict(alpha=0.05),
    dict(fit_intercept=True, positive_weights=False, alpha=0.05),
]


def _reference_objective(theta, X, y, shape, gate, activation, fit_intercept, alpha):
    """Plain-NumPy objective: mean squared residual (+ c) + alpha (‖M‖²_F + ‖a‖²)."""
    P = n_params(*shape)
    G = unpack(theta[:P], shape)
    c = theta[P] if fit_intercept else 0.0
    f = f_ref(G.omega, G.M, G.a, X, gate, activation) + c
    return np.mean((f - y) ** 2) + alpha * (np.sum(G.M**2) + np.sum(G.a**2))


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("activation", ["sigmoid", "gelu"])
@pytest.mark.parametrize("fit_intercept, alpha", [(True, 0.0), (False, 0.3), (True, 0.3)])
def test_gradient_with_options_matches_finite_differences(gate, activation, fit_intercept, alpha):
    shape = (2, 3, 2, 2)
    rng = np.random.default_rng(11)
    omega, M, a = random_arrays(*shape, rng)
    omega[0, 1] = -0.6  # signed weights (positive_weights=False) reach the kernel as they are
    theta = pack(MixingMeasure(omega, M, a))
    if fit_intercept:
        theta = np.append(theta, 0.7)
    X = rng.uniform(-1, 1, size=(BLOCK + 31, shape[3]))
    y = f_ref(omega, M, a, X, gate, activation) + 0.5 + 0.1 * rng.normal(size=len(X))
    XT = np.ascontiguousarray(X.T)
    codes = GATE_CODES[gate], ACTIVATION_CODES[activation]

    def value(t):
        return objective_and_gradient(t, XT, y, *shape, *codes, fit_intercept, alpha)[0]

    obj, grad = objective_and_gradient(theta, XT, y, *shape, *codes, fit_intercept, alpha)
    assert grad.shape == theta.shape
    want = _reference_objective(theta, X, y, shape, gate, activation, fit_intercept, alpha)
    assert obj == pytest.approx(want, rel=1e-11)
    fd = fd_gradient(value, theta)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7 * max(1.0, np.abs(fd).max()))
    if fit_intercept:  # ∂/∂c = 2·mean(residual)
        f = f_ref(omega, M, a, X, gate, activation) + theta[-1]
        assert grad[-1] == pytest.approx(2 * np.mean(f - y), rel=1e-11)


def test_penalty_is_the_frobenius_norm_of_the_free_entries():
    shape = (1, 3, 1, 3)
    rng = np.random.default_rng(0)
    theta = pack(MixingMeasure(*random_arrays(*shape, rng)))
    XT = np.zeros((3, 5))
    y = np.zeros(5)
    v0 = objective_and_gradient(theta, XT, y, *shape, 0, 0)[0]
    v1 = objective_and_gradient(theta, XT, y, *shape, 0, 0, False, 2.0)[0]
    G = unpack(theta, shape)
    assert v1 - v0 == pytest.approx(2.0 * (np.sum(G.M**2) + np.sum(G.a**2)), rel=1e-12)
    assert len(triangle_indices(3)[0]) == 6


def test_kernel_rejects_theta_of_the_wrong_length():
    shape = (1, 2, 1, 2)
    theta = np.zeros(n_params(*shape))
    with pytest.raises(ValueError, match="fit_intercept=True needs"):
        objective_and_gradient(theta, np.zeros((2, 3)), np.zeros(3), *shape, 0, 0, True)


def test_signed_bounds():
    shape = (2, 2, 3, 2)
    lo, hi = make_bounds(shape, omega_max=4.0, param_bound=2.0, positive_weights=False)
    np.testing.assert_array_equal(lo[:6], -4.0)
    np.testing.assert_array_equal(hi[:6], 4.0)
    lo0, _ = make_bounds(shape, omega_max=4.0, param_bound=2.0)
    np.testing.assert_array_equal(lo0[:6], 0.0)
    np.testing.assert_array_equal(lo[6:], lo0[6:])


def _data(n=400, seed=0, shift=0.0, gate="none"):
    rng = np.random.default_rng(seed)
    omega, M, a = random_arrays(1, 2, 2, 2, rng, scale=1.0)
    M[:, -1] = 0.0
    G = MixingMeasure(omega, M, a)
    X = rng.uniform(-1, 1, size=(n, 2))
    y = regression_function(G, X, gate=gate) + 0.05 * rng.normal(size=n) + shift
    return X, y


def test_intercept_follows_a_shift_of_the_target():
    # MHA with K = 1 is identifiable (its f depends on omega·a only); the fit runs on the
    # centred target, so y + 100 changes only the rounding of y - mean(y)
    X, y = _data()
    kw = dict(n_experts=1, n_starts=2, random_state=0, fit_intercept=True)
    e0 = HMoERegressor(**kw).fit(X, y)
    e1 = HMoERegressor(**kw).fit(X, y + 100.0)
    assert e0.solver_ == e1.solver_ == "lm"  # the default solver carries the intercept
    assert e1.intercept_ - e0.intercept_ == pytest.approx(100.0, abs=1e-7)
    for name in ("omega", "M", "a"):
        np.testing.assert_allclose(
            getattr(e1.measure_, name), getattr(e0.measure_, name), rtol=0, atol=1e-5
        )
    np.testing.assert_allclose(e1.predict(X), e0.predict(X) + 100.0, rtol=0, atol=1e-6)


def test_intercept_follows_a_shift_of_the_target_gated():
    # with a sigmoid gate the intercept trades against Σω·φ's constant part (a flat
    # direction): rounding-level differences move the stopping point a little
    X, y = _data(gate="value")
    kw = dict(gate="value", n_experts=2, n_starts=2, random_state=0, fit_intercept=True)
    e0 = HMoERegressor(**kw).fit(X, y)
    e1 = HMoERegressor(**kw).fit(X, y + 100.0)
    assert e1.intercept_ - e0.intercept_ == pytest.approx(100.0, abs=1e-2)
    for name in ("omega", "M", "a"):
        np.testing.assert_allclose(
            getattr(e1.measure_, name), getattr(e0.measure_, name), rtol=0, atol=5e-2
        )
    np.testing.assert_allclose(e1.predict(X), e0.predict(X) + 100.0, rtol=0, atol=1e-3)


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("gate", ["none", "sdpa"])
def test_predict_is_regression_function_plus_intercept(options, gate):
    X, y = _data(n=200, shift=3.0, gate=gate)
    est = HMoERegressor(gate=gate, n_starts=1, max_iter=200, random_state=0, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", PoorFitWarning)  # no intercept on a shifted target
        est.fit(X, y)
    want = regression_function(est.measure_, X, gate=gate) + est.intercept_
    np.testing.assert_allclose(est.predict(X), want, rtol=1e-13, atol=1e-12)
    assert est.measure_.is_normalized()
    if not options.get("fit_intercept", False):
        assert est.intercept_ == 0.0
    if options.get("positive_weights", True):
        assert np.all(est.measure_.omega >= 0)


def test_signed_weights_follow_a_negative_target():
    # a sigmoid G2 model with omega >= 0 is positive; with signed weights it follows -y
    X, y = _data(n=300, gate="value")
    y = -np.abs(y) - 1.0
    kw = dict(n_experts=2, n_starts=2, random_state=0)
    with pytest.warns(PoorFitWarning, match="positive_weights=False"):
        pos = G2Regressor(**kw).fit(X, y)
    assert np.all(pos.predict(X) >= 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PoorFitWarning)
        signed = G2Regressor(positive_weights=False, **kw).fit(X, y)
    assert np.any(signed.measure_.omega < 0)
    assert signed.score(X, y) > 0.5 > pos.score(X, y)


def test_penalty_shrinks_the_parameters():
    X, y = _data(n=300)
    kw = dict(n_experts=2, n_starts=2, random_state=0)
    e0 = HMoERegressor(**kw).fit(X, y)
    e1 = HMoERegressor(alpha=1.0, **kw).fit(X, y)

    def size(G):
        return np.sum(G.M**2) + np.sum(G.a**2)

    assert size(e1.measure_) < size(e0.measure_)
    assert e1.objective_ > e0.objective_


_FAST = dict(n_starts=2, max_iter=200, random_state=0)


@parametrize_with_checks(
    [
        HMoERegressor(fit_intercept=True, **_FAST),
        HMoERegressor(gate="value", positive_weights=False, **_FAST),
        HMoERegressor(gate="sdpa", alpha=0.01, **_FAST),
        MHARegressor(alpha=0.01, **_FAST),
        G1Regressor(fit_intercept=True, positive_weights=False, **_FAST),
        G2Regressor(fit_intercept=True, positive_weights=False, alpha=0.01, **_FAST),
    ]
)
def test_sklearn_compatible_with_options(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def test_options_pickle_clone_and_gridsearch():
    X, y = _data(n=240, shift=5.0)
    est = HMoERegressor(n_experts=1, n_starts=1, max_iter=100, random_state=0)
    assert est.get_params()["fit_intercept"] is False
    assert est.get_params()["positive_weights"] is True
    assert est.get_params()["alpha"] == 0.0
    grid = {"fit_intercept": [False, True], "positive_weights": [True, False], "alpha": [0.0, 0.1]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", PoorFitWarning)
        search = GridSearchCV(clone(est), grid, cv=2).fit(X, y)
        fitted = clone(est).set_params(fit_intercept=True, alpha=0.1).fit(X, y)
    assert search.best_params_["fit_intercept"] is True  # the target has mean 5
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    restored = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(restored.predict(X), fitted.predict(X))
    assert restored.intercept_ == fitted.intercept_
    for cls in (MHARegressor, G1Regressor, G2Regressor):
        params = cls(fit_intercept=True, positive_weights=False, alpha=0.5).get_params()
        assert params["fit_intercept"] and not params["positive_weights"]
        assert params["alpha"] == 0.5


@pytest.mark.parametrize(
    "params, match",
    [
        ({"alpha": -0.1}, "alpha"),
        ({"alpha": np.nan}, "alpha"),
        ({"alpha": "0.1"}, "alpha"),
        ({"fit_intercept": 1}, "fit_intercept must be True or False"),
        ({"fit_intercept": "yes"}, "fit_intercept must be True or False"),
        ({"positive_weights": None}, "positive_weights must be True or False"),
        ({"positive_weights": 0}, "positive_weights must be True or False"),
    ],
)
def test_bad_options(params, match):
    X = np.random.default_rng(0).uniform(size=(20, 2))
    with pytest.raises(ValueError, match=match):
        HMoERegressor(**params).fit(X, X[:, 0])
    with pytest.raises(ValueError, match=match):
        G1Regressor(**params).fit(X, X[:, 0])


# -- the warning after a poor fit --------------------------------------------------------
def _warnings_of(est, X, y):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        est.fit(X, y)
    return [w for w in rec if issubclass(w.category, PoorFitWarning)]


def test_warns_once_without_intercept():
    X, y = _data(n=300, shift=100.0)
    rec = _warnings_of(HMoERegressor(n_starts=1, random_state=0), X, y)
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "no intercept" in msg and "fit_intercept=True" in msg
    assert "TransformedTargetRegressor" in msg
    assert "positive" not in msg  # MHA is not sign-constrained


def test_warns_positive_output_of_gated_model():
    X, y = _data(n=300, gate="sdpa")
    y = y - y.max() - 1.0  # negative target, intercept on: only the sign cause remains
    rec = _warnings_of(G1Regressor(n_starts=1, random_state=0, max_iter=50), X, y)
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "positive output" in msg and "positive_weights=False" in msg


def test_warns_too_few_samples_per_parameter():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(30, 3))
    y = rng.normal(size=30)
    est = HMoERegressor(n_experts=3, n_starts=1, max_iter=1, random_state=0,
                        fit_intercept=True, positive_weights=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        est.fit(X, y)
    from hmoe_estim.estimators._warnings import diagnose_fit

    with pytest.warns(PoorFitWarning, match="too few samples per parameter"):
        r2 = diagnose_fit(est, y, np.full(30, 10.0), 40)
    assert r2 < 0


def test_no_warning_on_a_good_fit():
    X, y = _data(n=300, shift=2.0)
    rec = _warnings_of(HMoERegressor(n_starts=2, random_state=0, fit_intercept=True), X, y)
    assert rec == []


@pytest.mark.parametrize("options", [{}, dict(fit_intercept=True, positive_weights=False)])
def test_constant_target_and_constant_columns(options):
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(-1, 1, 50), np.full(50, 3.0), np.zeros(50)])
    y = np.full(50, 7.5)
    est = HMoERegressor(n_starts=1, max_iter=100, random_state=0, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        rec = _warnings_of(est, X, y)
    assert len(rec) == 1 and "constant" in str(rec[0].message)
    assert np.isnan(est.train_r2_)
    pred = est.predict(X)
    assert np.all(np.isfinite(pred))
    if options:
        np.testing.assert_allclose(pred, 7.5, atol=1e-3)
    # constant columns only (a zero matrix) also fit without NaN
    Z = np.zeros((20, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est2 = HMoERegressor(n_starts=1, max_iter=20, **options).fit(Z, rng.normal(size=20))
    assert np.all(np.isfinite(est2.predict(Z)))


# -- the bundled diabetes data (no download) ---------------------------------------------
def test_diabetes_default_warns_and_options_match_ridge():
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import KFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = load_diabetes(return_X_y=True)
    # the default model on the raw target (mean 152) warns, naming both causes
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        make_pipeline(StandardScaler(), G2Regressor(n_starts=1, max_iter=100, random_state=0)) \
            .fit(X, y)
    msgs = [str(w.message) for w in rec if issubclass(w.category, PoorFitWarning)]
    assert len(msgs) == 1
    assert "fit_intercept=True" in msgs[0] and "positive_weights=False" in msgs[0]
    # with the options (the grid's best of docs/examples/plot_real_data.py) the 5-fold CV R²
    # is at least RidgeCV's minus 0.02
    cv = KFold(5, shuffle=True, random_state=0)
    ridge = cross_val_score(
        make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-3, 3, 13))), X, y, cv=cv
    ).mean()
    hmoe = make_pipeline(StandardScaler(), TransformedTargetRegressor(
        regressor=G2Regressor(n_tokens=1, n_experts=2, fit_intercept=True, positive_weights=False,
                              alpha=0.1, n_starts=2, max_iter=300, random_state=0),
        transformer=StandardScaler(),
    ))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        score = cross_val_score(hmoe, X, y, cv=cv).mean()
    assert score >= ridge - 0.02, (score, ridge)
