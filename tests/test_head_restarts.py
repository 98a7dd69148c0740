"""Head restarts of the global search (:class:`~hmoe_estim.solvers.HeadRestarts`, a move of
:class:`~hmoe_estim.solvers.Search`)."""

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
from hmoe_estim.model import n_params, pack, random_start, unpack
from hmoe_estim.model._starts import random_start_theta
from hmoe_estim.solvers import HeadRestarts, LevenbergMarquardt, Search

from .problems import make_problem


@pytest.mark.parametrize("shape", [(2, 2, 1, 2), (2, 3, 2, 3), (3, 2, 2, 2)])
def test_head_indices_partition_the_measure_by_head(shape):
    H, N, K, D = shape
    # a measure whose every entry of head h equals h + 1 (M[h, N-1] = 0 by the normalisation)
    omega = np.repeat(np.arange(1.0, H + 1), K).reshape(H, K)
    M = np.zeros((H, N, D, D))
    M[:, : N - 1] = np.arange(1.0, H + 1)[:, None, None, None]
    a = np.broadcast_to(np.arange(1.0, H + 1)[:, None, None, None], (H, N, K, D)).copy()
    theta = pack(MixingMeasure(omega, M, a))
    idx = make_problem(np.zeros((4, D)), np.zeros(4), shape, "none").head_blocks()
    assert len(idx) == H
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
              random_state=0)
    # one round, no other move: the restarts' effect alone (the soft-mode moves of the "auto"
    # moves reach below the truth here without head restarts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = HMoERegressor(solver=Search(rounds=1, moves=[]), **kw).fit(X, y)
        on = HMoERegressor(solver=Search(rounds=1, moves=[HeadRestarts()]), **kw).fit(X, y)
    assert off.objective_ > truth and off.head_restart_rounds_ == 0
    assert on.objective_ < truth and on.head_restart_rounds_ >= 1
    assert on.n_kernel_passes_ > off.n_kernel_passes_
    # the same candidates were raced: the restarts only replace the best start's result
    np.testing.assert_array_equal(np.delete(on.start_objectives_, on.best_start_),
                                  np.delete(off.start_objectives_, on.best_start_))


@pytest.mark.parametrize("params", [dict(), dict(solver=Search(moves=[HeadRestarts(per_head=8)])),
                                    dict(solver="lbfgs")])
def test_one_head_has_no_head_restarts(params):
    X, y = make_hmoe_regression(300, n_features=2, gate="value", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = HMoERegressor(gate="value", n_starts=2, random_state=0, **params).fit(X, y)
    assert est.head_restart_rounds_ == 0
    # "auto" runs no head restarts with one head; asked for, they propose nothing there
    asked = isinstance(params.get("solver"), Search)
    assert est.schedule_["moves"] == (["HeadRestarts"] if asked else [])


def test_head_restarts_propose_nothing_with_one_head():
    problem = make_problem(np.zeros((4, 2)), np.zeros(4), (1, 2, 2, 2), "value")
    assert HeadRestarts(per_head=8).propose(problem, np.zeros(problem.n_params),
                                            lambda: 1 / 0) == []


@pytest.mark.parametrize("value", [0, -1, 1.5, "many", None, True])
def test_head_restarts_is_validated(value):
    X, y = make_hmoe_regression(50, random_state=0)
    with pytest.raises(ValueError, match="per_head must be an integer >= 1"):
        HMoERegressor(solver=Search(moves=[HeadRestarts(per_head=value)])).fit(X, y)


def test_head_restarts_never_raise_the_objective():
    shape = (2, 2, 1, 2)
    G = random_measure(2, 2, 1, 2, scale=2.0, random_state=3)
    X, y = make_hmoe_regression(400, measure=G, n_experts=1, n_features=2, gate="sdpa",
                                noise=0.1, random_state=4)
    problem = make_problem(X, y, shape, "sdpa")
    lower, upper = problem.lower, problem.upper
    rng = np.random.RandomState(0)

    def draw():
        return np.clip(pack(random_start(shape, rng)), lower, upper)

    start = draw()

    def search(moves):
        # one start run to convergence (the incumbent), then the moves of it
        return Search(local=LevenbergMarquardt(max_iter=300, tol=1e-9), n_starts=1,
                      n_candidates=1, race_iter=5, rounds=1, moves=moves, signed=False).run(
            problem, draw, [start])

    inc = search([]).results[0]
    found = search([HeadRestarts(per_head=4)])
    best, rounds = found.results[0], found.move_rounds["restart"]
    assert len(found.results) == 1 and found.move_rounds["local"] == 0
    assert best.objective <= inc.objective
    assert found.n_passes > sum(r.n_passes for r in [inc]) and 0 <= rounds <= 10
    assert np.all(best.theta >= lower) and np.all(best.theta <= upper)
    if rounds == 0:
        np.testing.assert_array_equal(best.theta, inc.theta)
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
    kw = dict(n_heads=2, n_experts=1, gate="value", n_starts=2,
              solver=Search(n_candidates=8, moves=[HeadRestarts(per_head=4)]),
              fit_intercept=True, alpha=1e-4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = HMoERegressor(**kw).fit(X, y)
        two = HMoERegressor(n_jobs=2, **kw).fit(X, y)
    assert one.objective_ < 0.02  # σ² = 0.01: the offset is fitted (by c or by the experts)
    assert one.head_restart_rounds_ == two.head_restart_rounds_
    np.testing.assert_array_equal(one.theta_, two.theta_)
    assert one.objective_ == two.objective_
