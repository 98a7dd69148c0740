"""Head restarts of the global search (``solvers._search.restart_heads``, ``head_restarts``)."""

import warnings

import numpy as np
import pytest

from hmoe_estim import (
    HMoERegressor,
    MixingMeasure,
    make_hmoe_regression,
    random_measure,
    regression_function,
)
from hmoe_estim.model import make_bounds, n_params, pack, random_start, unpack
from hmoe_estim.model._starts import random_start_theta
from hmoe_estim.solvers._gauss_newton import levenberg_marquardt
from hmoe_estim.solvers._search import _head_indices, hop, restart_heads


@pytest.mark.parametrize("shape", [(2, 2, 1, 2), (2, 3, 2, 3), (3, 2, 2, 2)])
def test_head_indices_partition_the_measure_by_head(shape):
    H, N, K, D = shape
    # a measure whose every entry of head h equals h + 1 (M[h, N-1] = 0 by the normalisation)
    omega = np.repeat(np.arange(1.0, H + 1), K).reshape(H, K)
    M = np.zeros((H, N, D, D))
    M[:, : N - 1] = np.arange(1.0, H + 1)[:, None, None, None]
    a = np.broadcast_to(np.arange(1.0, H + 1)[:, None, None, None], (H, N, K, D)).copy()
    theta = pack(MixingMeasure(omega, M, a))
    idx = _head_indices(shape)
    together = np.sort(np.concatenate(idx))
    np.testing.assert_array_equal(together, np.arange(n_params(*shape)))  # disjoint, complete
    for h, ih in enumerate(idx):
        np.testing.assert_array_equal(theta[ih], h + 1.0)
        t = theta.copy()
        t[ih] = 0.0
        G = unpack(t, shape)
        assert np.all(G.omega[h] == 0) and np.all(G.M[h] == 0) and np.all(G.a[h] == 0)
        others = [g for g in range(H) if g != h]
        assert np.all(G.omega[others] != 0) and np.all(G.a[others] != 0)


def test_head_restarts_repair_a_certified_local_optimum():
    # a two-head truth of benchmarks/bench_solver.py's suite (value gate, tanh, D = 3, N = 2,
    # K = K* = 2, n = 1000, truth seed 1000, data seed 10000) where the race alone ends above
    # the truth's objective (a certified failure), and the head restarts reach below it
    G = random_measure(2, 2, 2, 3, scale=2.0, random_state=1000)
    X, y = make_hmoe_regression(1000, measure=G, n_experts=2, n_features=3, gate="value",
                                activation="tanh", noise=0.1, random_state=10000)
    truth = float(np.mean((y - regression_function(G, X, gate="value", activation="tanh")) ** 2))
    kw = dict(n_heads=2, n_tokens=2, n_experts=2, gate="value", activation="tanh",
              search_rounds=1, reassign_experts=False,
              random_state=0)  # one round, no moves: the restarts' effect alone (the soft-mode
    # moves of reassign_experts="auto" reach below the truth here without head restarts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = HMoERegressor(head_restarts=0, **kw).fit(X, y)
        on = HMoERegressor(**kw).fit(X, y)
    assert off.objective_ > truth and off.head_restart_rounds_ == 0
    assert on.objective_ < truth and on.head_restart_rounds_ >= 1
    assert on.n_kernel_passes_ > off.n_kernel_passes_
    # the same candidates were raced: the restarts only replace the best start's result
    np.testing.assert_array_equal(np.delete(on.start_objectives_, on.best_start_),
                                  np.delete(off.start_objectives_, on.best_start_))


@pytest.mark.parametrize("params", [dict(), dict(head_restarts=8), dict(solver="lbfgs")])
def test_one_head_has_no_head_restarts(params):
    X, y = make_hmoe_regression(300, n_features=2, gate="value", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = HMoERegressor(gate="value", n_starts=2, random_state=0, **params).fit(X, y)
    assert est.head_restart_rounds_ == 0


@pytest.mark.parametrize("value", [-1, 1.5, "many", None, True])
def test_head_restarts_is_validated(value):
    X, y = make_hmoe_regression(50, random_state=0)
    with pytest.raises(ValueError, match="head_restarts must be 'auto' or an integer >= 0"):
        HMoERegressor(head_restarts=value).fit(X, y)


@pytest.mark.parametrize("search", ["restart_heads", "hop"])
def test_perturb_and_refit_never_raises_the_objective(search):
    shape = (2, 2, 1, 2)
    G = random_measure(2, 2, 1, 2, scale=2.0, random_state=3)
    X, y = make_hmoe_regression(400, measure=G, n_experts=1, n_features=2, gate="sdpa",
                                noise=0.1, random_state=4)
    XT = np.ascontiguousarray(X.T)
    lower, upper = make_bounds(shape, omega_max=10.0, param_bound=10.0)
    rng = np.random.RandomState(0)

    def draw():
        return np.clip(pack(random_start(shape, rng)), lower, upper)

    inc = levenberg_marquardt(draw(), XT, y, shape, "sdpa", "sigmoid", lower, upper,
                              max_iter=300)
    kw = dict(race_iter=5, max_iter=300, tol=1e-9, signed=False)
    if search == "hop":
        best, passes, rounds = hop(inc, XT, y, shape, "sdpa", "sigmoid", (lower, upper), draw,
                                   n_rounds=3, **kw)
    else:
        best, passes, rounds = restart_heads(inc, XT, y, shape, "sdpa", "sigmoid",
                                             (lower, upper), draw, n_per_head=4,
                                             max_rounds=3, **kw)
    assert best.objective <= inc.objective
    assert passes > 0 and 0 <= rounds <= 3
    assert np.all(best.theta >= lower) and np.all(best.theta <= upper)
    if rounds == 0:
        assert best is inc
    else:  # every accepted round lowered the objective by more than σ̂²/n
        assert best.objective < inc.objective - rounds * best.objective / len(y)


@pytest.mark.parametrize("shape", [(1, 2, 2, 3), (2, 3, 1, 2)])
@pytest.mark.parametrize("positive", [True, False])
def test_random_start_theta_is_the_packed_random_start(shape, positive):
    kw = dict(x_rms=1.3, y_scale=0.7, omega_max=5.0, param_bound=0.4,
              positive_weights=positive)
    r1, r2 = np.random.RandomState(5), np.random.RandomState(5)
    for _ in range(3):  # the same stream, draw after draw
        np.testing.assert_array_equal(random_start_theta(shape, r1, **kw),
                                      pack(random_start(shape, r2, **kw)))


def test_head_restarts_carry_the_options_and_do_not_depend_on_n_jobs():
    G = random_measure(2, 2, 1, 2, scale=2.0, random_state=7)
    X, y = make_hmoe_regression(500, measure=G, n_experts=1, n_features=2, gate="value",
                                noise=0.1, random_state=8)
    y = y + 3.0  # an offset for the intercept
    kw = dict(n_heads=2, n_experts=1, gate="value", n_starts=2, n_candidates=8,
              head_restarts=4, fit_intercept=True, alpha=1e-4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = HMoERegressor(**kw).fit(X, y)
        two = HMoERegressor(n_jobs=2, **kw).fit(X, y)
    assert one.objective_ < 0.02  # σ² = 0.01: the offset is fitted (by c or by the experts)
    assert one.head_restart_rounds_ == two.head_restart_rounds_
    np.testing.assert_array_equal(one.theta_, two.theta_)
    assert one.objective_ == two.objective_
