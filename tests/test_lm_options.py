"""Levenberg–Marquardt with the estimator options: the intercept and the ridge penalty minimise
the same objective as L-BFGS-B (``kernels.objective.objective_and_gradient``)."""

import warnings

import numpy as np
import pytest

from hmoe_estim import HMoERegressor, MixingMeasure, make_hmoe_regression
from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
from hmoe_estim.kernels.objective import objective_and_gradient, penalty_weights
from hmoe_estim.model import make_bounds, n_params, pack, unpack
from hmoe_estim.solvers import LevenbergMarquardt, Search, levenberg_marquardt

from .problems import make_problem
from .reference import random_arrays


def test_penalty_weights_give_the_frobenius_norm():
    shape = (2, 3, 2, 3)
    rng = np.random.default_rng(0)
    theta = pack(MixingMeasure(*random_arrays(*shape, rng)))
    G = unpack(theta, shape)
    w = penalty_weights(shape)
    assert w.shape == theta.shape and np.all(w[: 2 * 2] == 0.0)  # omega is not penalised
    assert w @ theta**2 == pytest.approx(np.sum(G.M**2) + np.sum(G.a**2), rel=1e-13)


@pytest.mark.parametrize("gate,activation", [("none", "sigmoid"), ("value", "sigmoid"),
                                             ("sdpa", "tanh"), ("output", "gelu"),
                                             ("value", "silu")])
@pytest.mark.parametrize("fit_offset", [False, True])
def test_lm_with_penalty_is_stationary_for_the_penalised_objective(gate, activation,
                                                                   fit_offset):
    alpha = 0.05
    X, y, G = make_hmoe_regression(500, n_features=2, gate=gate, activation=activation,
                                   noise=0.05, random_state=3, return_measure=True)
    y = y + 0.7
    XT = np.require(X.T, requirements=["C", "W"])
    shape = G.shape
    lower, upper = make_bounds(shape, omega_max=10.0, param_bound=10.0)
    theta0 = pack(G) + 0.1 * np.random.default_rng(0).normal(size=n_params(*shape))
    res = levenberg_marquardt(theta0, XT, y, shape, gate, activation, lower, upper,
                              alpha=alpha, fit_offset=fit_offset, tol=1e-15, stat_tol=1e-12,
                              max_iter=500)
    assert res.converged, res.message
    theta = np.append(res.theta, res.offset) if fit_offset else res.theta
    codes = GATE_CODES[gate], ACTIVATION_CODES[activation]
    value, grad = objective_and_gradient(theta, XT, y, *shape, *codes, fit_offset, alpha)
    # the reported objective is the penalised mean squared residual of L-BFGS-B's kernel
    assert res.objective == pytest.approx(value, rel=1e-12)
    start = np.append(theta0, 0.0) if fit_offset else theta0
    g0 = objective_and_gradient(start, XT, y, *shape, *codes, fit_offset, alpha)[1]
    # first-order conditions on the box: zero gradient inside, pointing outwards at a bound
    P = theta0.size
    at_lo = np.zeros(theta.size, bool)
    at_up = np.zeros(theta.size, bool)
    at_lo[:P] = res.theta <= lower
    at_up[:P] = res.theta >= upper
    inside = ~(at_lo | at_up)
    assert np.abs(grad[inside]).max() <= 1e-6 * np.abs(g0).max()
    assert np.all(grad[at_lo] >= -1e-9) and np.all(grad[at_up] <= 1e-9)


def _fit_both(gate, activation, seed, **options):
    X, y = make_hmoe_regression(500, n_features=2, gate=gate, activation=activation,
                                noise=0.05, random_state=seed)
    y = y + 3.0
    kw = dict(gate=gate, activation=activation, n_experts=2,
              random_state=seed, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = HMoERegressor(**kw).fit(X, y)
        lb = HMoERegressor(solver="lbfgs", **kw).fit(X, y)
    return X, y, lm, lb


@pytest.mark.parametrize("gate,activation,seed", [("none", "sigmoid", 0), ("value", "sigmoid", 1),
                                                  ("sdpa", "tanh", 0), ("value", "gelu", 1)])
def test_lm_with_intercept_reaches_lbfgs_objective(gate, activation, seed):
    X, y, lm, lb = _fit_both(gate, activation, seed, fit_intercept=True)
    assert lm.solver_ == "lm" and lb.solver_ == "lbfgs"
    unit = lb.objective_ / len(y)  # σ̂²/n
    assert lm.objective_ <= lb.objective_ + 0.1 * unit
    if gate == "none":  # no constant in f: c is identifiable (gated: it trades with Σω·φ)
        assert lm.intercept_ == pytest.approx(lb.intercept_, abs=1e-3)
    resid = lm.predict(X) - y
    assert lm.objective_ == pytest.approx(np.mean(resid**2), rel=1e-10)
    # ∂/∂c = 0 up to the stopping rule: a step in c alone would gain n·mean(r)² < 0.01 σ̂²
    assert abs(np.mean(resid)) < 0.1 * np.sqrt(unit)


@pytest.mark.parametrize("gate,activation,seed", [("none", "sigmoid", 0), ("sdpa", "tanh", 1),
                                                  ("value", "gelu", 0)])
def test_lm_with_penalty_matches_lbfgs_objective(gate, activation, seed):
    alpha = 0.01
    X, y, lm, lb = _fit_both(gate, activation, seed, fit_intercept=True, alpha=alpha)
    assert lm.solver_ == "lm"
    unit = lb.objective_ / len(y)
    assert lm.objective_ <= lb.objective_ + 0.1 * unit
    # objective_ is the penalised objective at the returned parameters (data at unit scale)
    codes = GATE_CODES[gate], ACTIVATION_CODES[activation]
    value = objective_and_gradient(lm.theta_, np.ascontiguousarray(X.T), y, 1, 2, 2, 2,
                                   *codes, True, alpha)[0]
    assert lm.objective_ == pytest.approx(value, rel=1e-10)


def _race(problem, starts, *, n_keep, race_iter, max_iter, signed):
    """One round of the search on ``starts``: the race, no moves; the finished starts."""
    search = Search(local=LevenbergMarquardt(max_iter=max_iter, tol=1e-9), n_starts=n_keep,
                    n_candidates=len(starts), race_iter=race_iter, rounds=1, moves=[],
                    signed=signed)
    return search.run(problem, None, starts).results


def test_race_carries_the_intercept_through_the_sign_fold():
    X, y, G = make_hmoe_regression(600, n_features=2, gate="none", noise=0.05, random_state=0,
                                   return_measure=True)
    y = y - 2.0
    shape = (1, 2, 2, 2)
    problem = make_problem(X, y, shape, "none", fit_intercept=True, alpha=0.001)
    lower, upper = problem.lower, problem.upper
    rng = np.random.default_rng(0)
    starts = [np.append(np.clip(rng.normal(size=n_params(*shape)), lower[:-1], upper[:-1]), 0.0)
              for _ in range(8)]
    results = _race(problem, starts, n_keep=2, race_iter=5, max_iter=100, signed=True)
    assert len(results) == 2
    for r in results:
        assert r.theta.shape == (n_params(*shape) + 1,)
        assert r.theta[-1] == r.offset and np.all(r.theta[:2] >= 0)  # folded back to ω >= 0
        assert r.offset == pytest.approx(-2.0, abs=0.3)
    t = np.array([-1.0, 2.0, *range(n_params(*shape) - 2), 5.0])
    folded = problem.fold(t)
    assert folded[-1] == 5.0 and folded[0] == 1.0


@pytest.mark.parametrize("gate,samples", [("none", 1024), ("output", 4096), ("value", 4096)])
def test_race_subsample_per_gate(gate, samples, monkeypatch):
    import hmoe_estim.solvers._local as local

    seen = []
    real = local.run_lm_starts

    def spy(starts, problem, *args, **kwargs):
        seen.append(problem.n_samples)
        return real(starts, problem, *args, **kwargs)

    monkeypatch.setattr(local, "run_lm_starts", spy)
    X, y = make_hmoe_regression(5000, n_features=2, gate=gate, noise=0.05, random_state=0)
    shape = (1, 2, 1, 2)
    problem = make_problem(X, y, shape, gate)
    assert Search(race_iter=2).schedule(problem).race_samples == samples
    rng = np.random.default_rng(0)
    starts = [np.clip(rng.normal(size=n_params(*shape)), problem.lower, problem.upper)
              for _ in range(3)]
    _race(problem, starts, n_keep=1, race_iter=2, max_iter=5, signed=False)
    assert seen == [samples, 5000]  # the race on the subsample, the kept start on all
    # with successive halving, the first half on a quarter of the samples (at least 1024)
    seen.clear()
    starts = [np.clip(rng.normal(size=n_params(*shape)), problem.lower, problem.upper)
              for _ in range(9)]
    _race(problem, starts, n_keep=1, race_iter=2, max_iter=5, signed=False)
    assert seen == [max(1024, samples // 4), samples, 5000]
