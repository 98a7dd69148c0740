"""Rounds of the whole search (``search_rounds``): fresh candidates until the optimum is
found twice (three times with signed weights)."""

import warnings

import numpy as np
import pytest

from hmoe_estim import HMoERegressor, make_hmoe_regression, random_measure, regression_function
from hmoe_estim.solvers._search import search_rounds_schedule, starts_to_stop


def _fit(X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HMoERegressor(**kw).fit(X, y)


@pytest.fixture(scope="module")
def hard():
    """A two-head truth of ``benchmarks/bench_solver.py``'s suite (value gate, tanh, D = 3,
    N = 2, K = K* = 2, n = 1000) and the truth's own objective on the data."""
    G = random_measure(2, 2, 2, 3, scale=2.0, random_state=1000)
    X, y = make_hmoe_regression(1000, measure=G, n_experts=2, n_features=3, gate="value",
                                activation="tanh", noise=0.1, random_state=10000)
    truth = float(np.mean((y - regression_function(G, X, gate="value", activation="tanh")) ** 2))
    return X, y, truth


def test_a_fresh_round_repairs_a_certified_local_optimum(hard):
    # without head restarts and with a small race, one round ends above the truth's objective
    # (a certified failure); the later rounds' fresh candidates reach below it
    X, y, truth = hard
    kw = dict(n_heads=2, n_experts=2, gate="value", activation="tanh", n_starts=2,
              n_candidates=32, head_restarts=0, random_state=2)
    one = _fit(X, y, search_rounds=1, **kw)
    three = _fit(X, y, search_rounds=3, **kw)
    assert one.objective_ > truth and one.search_rounds_ == 1
    assert three.objective_ < truth and three.search_rounds_ >= 2
    # round 1 is the one-round fit; every round adds its n_starts finished starts
    assert three.start_objectives_.shape == (2 * three.search_rounds_,)
    np.testing.assert_array_equal(three.start_objectives_[:2], one.start_objectives_)
    assert three.best_start_ >= 2 and three.n_kernel_passes_ > one.n_kernel_passes_
    assert three.start_n_iter_.shape == three.start_converged_.shape == (2 * three.search_rounds_,)


@pytest.mark.parametrize("activation,n_heads,to_stop", [
    ("tanh", 1, 3),     # signed weights: three agreeing starts stop the rounds, not two
    ("sigmoid", 2, 2),  # otherwise two
])
def test_the_search_stops_once_the_optimum_is_found_by_enough_starts(activation, n_heads,
                                                                     to_stop):
    # truths of the suite (value gate, N = 2, D = 2, K = K* = 2, n = 1000), two starts a round
    G = random_measure(n_heads, 2, 2, 2, scale=2.0, random_state=1000)
    X, y = make_hmoe_regression(1000, measure=G, n_experts=2, n_features=2, gate="value",
                                activation=activation, noise=0.1, random_state=10000)
    kw = dict(n_heads=n_heads, n_experts=2, gate="value", activation=activation,
              n_candidates=32, head_restarts=0, search_rounds=4)
    assert starts_to_stop("value", activation) == to_stop
    # one start per round: as many rounds at least as starts are needed
    single = _fit(X, y, n_starts=1, random_state=1, **kw)
    assert single.search_rounds_ >= to_stop
    ran, stopped_with = [], []
    for seed in range(4):
        est = _fit(X, y, n_starts=2, random_state=seed, **kw)
        ran.append(est.search_rounds_)
        if est.search_rounds_ < 4:  # stopped early: the best was reached by enough starts
            assert est.n_starts_agreeing_ >= to_stop
            stopped_with.append(est.n_starts_agreeing_)
        # ... and not before: every earlier round ended with fewer
        for r in range(1, est.search_rounds_):
            obj = est.start_objectives_[: 2 * r]
            assert np.sum(obj <= obj.min() * (1 + 1 / len(y))) < to_stop
    # both ends of the rule occur on these seeds: an early stop, and the cap
    assert min(ran) < 4 and max(ran) == 4
    if to_stop == 2:  # two are enough here
        assert 2 in stopped_with


@pytest.mark.parametrize("gate,n_heads,activation,rounds", [
    ("value", 2, "sigmoid", 6),   # gated with several heads: up to 6 rounds
    ("sdpa", 2, "gelu", 6),
    ("sdpa", 1, "tanh", 6),       # gated with signed weights (odd φ): up to 6 rounds
    ("value", 1, "tanh", 6),
    ("value", 2, "tanh", 6),
    ("value", 1, "sigmoid", 1),   # one head otherwise: one round
    ("sdpa", 1, "silu", 1),
    ("none", 2, "sigmoid", 1),    # linear gate: one round
])
def test_auto_search_rounds_is_the_documented_count(gate, n_heads, activation, rounds):
    # starts stopped after 2 iterations end apart, so the optimum is never found twice and
    # the search runs until its cap: "auto" must run exactly the documented count, fit as the
    # explicit count does, and one round fewer than a cap one higher
    X, y = make_hmoe_regression(200, n_features=2, n_heads=n_heads, gate=gate,
                                activation=activation, noise=0.05, random_state=4)
    kw = dict(n_heads=n_heads, n_experts=1, gate=gate, activation=activation, n_starts=1,
              n_candidates=4, race_iter=1, max_iter=2, head_restarts=0, random_state=0)
    auto = _fit(X, y, **kw)
    explicit = _fit(X, y, search_rounds=rounds, **kw)
    more = _fit(X, y, search_rounds=rounds + 1, **kw)
    assert auto.n_starts_agreeing_ == 1  # the premise: no round stopped the search
    assert auto.search_rounds_ == explicit.search_rounds_ == rounds
    np.testing.assert_array_equal(auto.theta_, explicit.theta_)
    assert auto.n_kernel_passes_ == explicit.n_kernel_passes_
    assert more.search_rounds_ == rounds + 1
    assert more.n_kernel_passes_ > auto.n_kernel_passes_


def test_starts_to_stop():
    # two agreeing starts stop the rounds; three with signed weights (value/SDPA with tanh),
    # where two often agree on a local optimum
    for gate in ("value", "sdpa"):
        assert starts_to_stop(gate, "tanh") == 3
        for act in ("sigmoid", "gelu", "silu"):
            assert starts_to_stop(gate, act) == 2
    # the linear gates have the sign symmetry too, but not the stricter stop
    for gate in ("none", "output"):
        for act in ("sigmoid", "tanh"):
            assert starts_to_stop(gate, act) == 2
    with pytest.raises(ValueError, match="gate"):
        starts_to_stop("bogus", "tanh")
    with pytest.raises(ValueError, match="activation"):
        starts_to_stop("value", "bogus")


def test_lbfgs_runs_one_round():
    X, y = make_hmoe_regression(200, n_features=2, n_heads=2, gate="value", random_state=0)
    est = _fit(X, y, n_heads=2, n_experts=1, gate="value", solver="lbfgs", n_starts=2,
               max_iter=50, search_rounds=3, random_state=0)
    assert est.search_rounds_ == 1 and est.start_objectives_.shape == (2,)


def test_search_rounds_schedule():
    from hmoe_estim.solvers._search import SEARCH_ROUNDS, SEARCH_ROUNDS_SIGNED

    assert (SEARCH_ROUNDS, SEARCH_ROUNDS_SIGNED) == (6, 6)
    for gate in ("value", "sdpa"):
        for heads in (1, 2, 3):
            assert search_rounds_schedule(gate, "tanh", heads) == SEARCH_ROUNDS_SIGNED
            for act in ("sigmoid", "gelu", "silu"):
                assert search_rounds_schedule(gate, act, heads) == (
                    SEARCH_ROUNDS if heads > 1 else 1)
    for gate in ("none", "output"):
        for act in ("sigmoid", "tanh"):
            assert search_rounds_schedule(gate, act, 2) == 1
    with pytest.raises(ValueError, match="gate"):
        search_rounds_schedule("bogus", "tanh", 2)
    with pytest.raises(ValueError, match="activation"):
        search_rounds_schedule("value", "bogus", 2)


@pytest.mark.parametrize("value", [0, -1, 1.5, "many", None, True])
def test_search_rounds_is_validated(value):
    X, y = make_hmoe_regression(50, random_state=0)
    with pytest.raises(ValueError, match="search_rounds must be 'auto' or an integer >= 1"):
        HMoERegressor(search_rounds=value).fit(X, y)
