"""HMoERegressor: recovery, scikit-learn conformance, reproducibility and bad input."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from hmoe_estim import (
    G1Regressor,
    G2Regressor,
    HMoERegressor,
    MHARegressor,
    MixingMeasure,
    regression_function,
)
from hmoe_estim.model import split_heaviest_channel

from .reference import random_arrays


def _truth(seed=1, shape=(1, 2, 2, 2), scale=2.0):
    rng = np.random.default_rng(seed)
    omega, M, a = random_arrays(*shape, rng, scale=scale)
    M[:, -1] = 0.0
    return MixingMeasure(omega, M, a)


# Small settings keep the ~50 checks per estimator fast; the defaults are exercised below.
_FAST = dict(n_starts=2, max_iter=200, random_state=0)


# Expected failures: none. The checks run every estimator with its own gate position.
@parametrize_with_checks(
    [
        HMoERegressor(gate="none", **_FAST),
        HMoERegressor(gate="value", **_FAST),
        HMoERegressor(gate="sdpa", **_FAST),
        HMoERegressor(gate="output", activation="tanh", **_FAST),
        MHARegressor(**_FAST),
        G1Regressor(**_FAST),
        G2Regressor(**_FAST),
    ]
)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


@pytest.mark.parametrize("gate", ["none", "value", "sdpa"])
def test_recovery_noiseless(gate):
    G = _truth()
    X = np.random.default_rng(5).uniform(-1, 1, size=(2000, 2))
    y = regression_function(G, X, gate=gate)
    est = HMoERegressor(n_heads=1, n_tokens=2, n_experts=2, gate=gate, n_starts=4, random_state=0)
    est.fit(X, y)
    assert est.score(X, y) >= 0.999
    assert est.measure_.shape == (1, 2, 2, 2)
    assert est.measure_.is_normalized()
    assert np.all(est.measure_.omega >= 0)
    # four finished starts a round: one round for one gated head with N = 2; one MHA head
    # stops after one only when most of its starts agree
    assert est.start_objectives_.shape == (4 * est.search_rounds_,)
    if gate != "none":
        assert est.search_rounds_ == 1 and est.search_stop_ == "rounds"
    elif est.search_rounds_ == 1:
        assert est.search_stop_ == "starts" and est.n_starts_agreeing_ >= 3
    assert est.objective_ == est.start_objectives_.min()


def test_default_estimator_fits_any_2d_numeric_X():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 5)) * 3 + 1
    y = np.sin(X[:, 0]) + X[:, 1]
    est = HMoERegressor().fit(X, y)
    assert np.all(np.isfinite(est.predict(X)))
    assert est.n_features_in_ == 5


def test_random_state_reproducible_and_independent_of_n_jobs():
    # n_jobs=2 runs the starts in two workers (the kernels' thread count set per worker); the
    # fit is the same as with n_jobs=1. (1200 samples: above L-BFGS-B's one-thread threshold,
    # solvers._lbfgsb.SERIAL_BELOW = 512; below Levenberg-Marquardt's, _lm.LM_SERIAL_BELOW.)
    G = _truth(seed=3)
    X = np.random.default_rng(2).uniform(-1, 1, size=(1200, 2))
    y = regression_function(G, X, gate="value") + 0.05 * np.random.default_rng(4).normal(size=1200)
    kw = dict(n_experts=3, gate="value", n_starts=3, max_iter=150, random_state=42)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m1 = HMoERegressor(n_jobs=1, **kw).fit(X, y).measure_
        m2 = HMoERegressor(n_jobs=2, **kw).fit(X, y).measure_
        m3 = HMoERegressor(n_jobs=1, **kw).fit(X, y).measure_
    assert m1 == m2 == m3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m4 = HMoERegressor(n_jobs=1, **{**kw, "random_state": 7}).fit(X, y).measure_
    assert m4 != m1


@pytest.mark.parametrize("gate", ["none", "value"])
def test_integer_target_fits_like_float_target(gate):
    # an int64 y used to reach the kernel as int64: a separately compiled specialisation
    # whose round-off differed, and L-BFGS-B amplified it into a different fit
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = rng.integers(0, 3, size=60)
    kw = dict(gate=gate, n_starts=2, max_iter=100, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m_int = HMoERegressor(**kw).fit(X, y).measure_
        m_float = HMoERegressor(**kw).fit(X, y.astype(float)).measure_
    assert m_int == m_float
    from hmoe_estim.kernels.jacobian import _pass_worker
    from hmoe_estim.kernels.objective import _objective_worker

    # y is the 5th argument of both workers (the kernels that take it, serial or parallel;
    # a pass that only predicts gets an empty float64 placeholder)
    kernels = (_objective_worker, _pass_worker)
    assert {str(sig[4].dtype) for k in kernels for sig in k.signatures} == {"float64"}


def test_clone_params_pickle_pipeline_gridsearch():
    G = _truth()
    X = np.random.default_rng(0).uniform(-1, 1, size=(300, 2))
    y = regression_function(G, X)
    est = HMoERegressor(n_experts=2, n_starts=1, max_iter=100, random_state=0)
    c = clone(est)
    assert c.get_params() == est.get_params()
    c.set_params(n_experts=3, gate="sdpa")
    assert c.n_experts == 3 and c.gate == "sdpa"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
        restored = pickle.loads(pickle.dumps(est))
        np.testing.assert_array_equal(restored.predict(X), est.predict(X))
        pipe = make_pipeline(StandardScaler(), clone(est)).fit(X, y)
        assert np.isfinite(pipe.score(X, y))
        grid = GridSearchCV(clone(est), {"n_experts": [1, 2, 3]}, cv=2).fit(X, y)
    assert grid.best_params_["n_experts"] in (1, 2, 3)
    assert np.all(np.isfinite(grid.cv_results_["mean_test_score"]))
    assert G2Regressor().get_params()["activation"] == "sigmoid"
    assert "gate" not in G1Regressor().get_params() and G1Regressor.gate == "sdpa"


def test_init_measures_are_used_and_checked():
    G = _truth()
    X = np.random.default_rng(0).uniform(-1, 1, size=(400, 2))
    y = regression_function(G, X, gate="sdpa")
    est = HMoERegressor(n_experts=2, gate="sdpa", init=G, n_starts=1, max_iter=5).fit(X, y)
    assert est.objective_ < 1e-12  # started at the truth, stays there
    split = split_heaviest_channel(G, random_state=0)
    assert split.n_experts == 3
    np.testing.assert_allclose(
        regression_function(split, X, gate="value"), regression_function(G, X, gate="value"),
        rtol=0.05, atol=0.05,
    )
    HMoERegressor(n_experts=3, gate="value", init=[split], n_starts=2, max_iter=20).fit(X, y)
    with pytest.raises(ValueError, match="shape"):
        HMoERegressor(n_experts=3, init=G).fit(X, y)
    with pytest.raises(ValueError, match="init"):
        HMoERegressor(init="truth").fit(X, y)
    with pytest.raises(ValueError, match="init"):
        HMoERegressor(init=[np.zeros(3)]).fit(X, y)


def test_convergence_warning_names_the_knob():
    G = _truth()
    X = np.random.default_rng(0).uniform(-1, 1, size=(300, 2))
    y = regression_function(G, X, gate="value")
    est = HMoERegressor(n_experts=2, gate="value", n_starts=2, max_iter=2, random_state=0)
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        est.fit(X, y)
    assert not est.converged_
    assert est.objective_ == est.start_objectives_.min()


def test_underdetermined_warns_once():
    X = np.random.default_rng(0).uniform(-1, 1, size=(10, 3))
    y = X.sum(axis=1)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        HMoERegressor(n_experts=3, n_starts=3, max_iter=20).fit(X, y)
    msgs = [w for w in rec if "under-determined" in str(w.message)]
    assert len(msgs) == 1


@pytest.mark.parametrize(
    "X, y, match",
    [
        (np.array([[np.nan, 1.0], [0.0, 1.0]]), np.array([1.0, 2.0]), "NaN"),
        (np.array([[np.inf, 1.0], [0.0, 1.0]]), np.array([1.0, 2.0]), "infinity"),
        (np.ones((3, 2)), np.array([1.0, np.nan, 0.0]), "NaN"),
        (np.ones((3, 2)), np.ones(4), "inconsistent numbers of samples"),
        (np.ones(5), np.ones(5), "2D array"),
        (np.ones((0, 2)), np.ones(0), "0 sample"),
        (np.ones((1, 2)), np.ones(1), "1 sample"),
    ],
)
def test_bad_data(X, y, match):
    with pytest.raises(ValueError, match=match):
        HMoERegressor().fit(X, y)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"n_experts": 0}, "n_experts"),
        ({"n_tokens": 0}, "n_tokens"),
        ({"n_heads": 0}, "n_heads"),
        ({"gate": "G7"}, "Unknown gate"),
        ({"activation": "relu"}, "Unknown activation"),
        ({"n_starts": 0}, "n_starts"),
        ({"max_iter": 0}, "max_iter"),
        ({"tol": -1.0}, "tol"),
        ({"param_bound": 0.0}, "param_bound"),
    ],
)
def test_bad_hyperparameters(params, match):
    X = np.random.default_rng(0).uniform(size=(20, 2))
    with pytest.raises(ValueError, match=match):
        HMoERegressor(**params).fit(X, X[:, 0])


def test_predict_errors():
    X = np.random.default_rng(0).uniform(size=(30, 2))
    with pytest.raises(NotFittedError):
        HMoERegressor().predict(X)
    est = HMoERegressor(n_starts=1, max_iter=20).fit(X, X[:, 0])
    with pytest.raises(ValueError, match="features"):
        est.predict(np.ones((3, 4)))


def test_large_but_finite_inputs_predict_finite():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(100, 2))
    est = HMoERegressor(n_starts=1, max_iter=30, random_state=0).fit(X, X[:, 0] ** 2)
    big = np.array([[1e5, -1e5], [3e4, 2e4]])
    assert np.all(np.isfinite(est.predict(big)))
