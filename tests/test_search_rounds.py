"""Rounds of the whole search (``Search(rounds=...)``): fresh candidates until the optimum is
found by two rounds (``agree``)."""

import warnings

import numpy as np
import pytest

from hmoe_estim import HMoERegressor, make_hmoe_regression, random_measure, regression_function
from hmoe_estim.solvers import ExpertReassignment, Search, SoftModes, count_agreeing

from .problems import schedule_of


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
    # without head restarts (the local moves only) and with a small race, one round ends above
    # the truth's objective (a certified failure); the later rounds' fresh candidates reach
    # below it
    X, y, truth = hard
    kw = dict(n_heads=2, n_experts=2, gate="value", activation="tanh", n_starts=2,
              random_state=2)

    def search(rounds):
        return Search(n_candidates=32, moves=[ExpertReassignment(), SoftModes()],
                      rounds=rounds)

    one = _fit(X, y, solver=search(1), **kw)
    three = _fit(X, y, solver=search(3), **kw)
    assert one.objective_ > truth and one.search_rounds_ == 1
    assert one.search_stop_ == "rounds" and one.head_restart_rounds_ == 0
    assert three.objective_ < truth and three.search_rounds_ >= 2
    # round 1 is the one-round fit; every round adds its n_starts finished starts
    assert three.start_objectives_.shape == (2 * three.search_rounds_,)
    np.testing.assert_array_equal(three.start_objectives_[:2], one.start_objectives_)
    assert three.best_start_ >= 2 and three.n_kernel_passes_ > one.n_kernel_passes_
    assert three.start_n_iter_.shape == three.start_converged_.shape == (2 * three.search_rounds_,)


@pytest.mark.parametrize("activation,n_heads", [("tanh", 1), ("sigmoid", 2)])
def test_the_search_stops_once_the_optimum_is_found_by_enough_rounds(activation, n_heads):
    # truths of the suite (value gate, N = 2, D = 2, K = K* = 2, n = 1000), two starts a round.
    # Agreement counts rounds (independent races), not the starts of one race.
    G = random_measure(n_heads, 2, 2, 2, scale=2.0, random_state=1000)
    X, y = make_hmoe_regression(1000, measure=G, n_experts=2, n_features=2, gate="value",
                                activation=activation, noise=0.1, random_state=10000)
    kw = dict(n_heads=n_heads, n_experts=2, gate="value", activation=activation,
              solver=Search(n_candidates=32, moves=[], rounds=4))
    to_stop = schedule_of("value", n_heads, activation).agree
    assert to_stop == 2
    # however many starts of one round agree, it takes to_stop rounds to stop
    single = _fit(X, y, n_starts=1, random_state=1, **kw)
    assert single.search_rounds_ >= to_stop
    ran, stopped_with, stops = [], [], set()
    for seed in range(5):
        est = _fit(X, y, n_starts=2, random_state=seed, **kw)
        ran.append(est.search_rounds_)
        stops.add(est.search_stop_)
        assert est.schedule_["agree"] == to_stop
        # the best objective of each round (two finished starts a round)
        round_best = est.start_objectives_.reshape(est.search_rounds_, 2).min(axis=1)
        assert est.n_rounds_agreeing_ == count_agreeing(round_best, len(y))
        if est.search_rounds_ < 4:  # stopped early: the best was reached by enough rounds
            assert est.n_rounds_agreeing_ >= to_stop and est.search_stop_ == "agreement"
            stopped_with.append(est.n_rounds_agreeing_)
        else:
            assert est.search_stop_ in ("agreement", "rounds")
        # ... and not before: every earlier round ended with fewer
        for r in range(1, est.search_rounds_):
            assert count_agreeing(round_best[:r], len(y)) < to_stop
    # both ends of the rule occur on these seeds: an early stop, and the cap
    assert min(ran) < 4 and max(ran) == 4 and stops == {"agreement", "rounds"}
    assert to_stop in stopped_with


@pytest.mark.parametrize("gate,n_heads,activation,rounds,first", [
    ("value", 2, "sigmoid", 12, 0),   # gated with several heads: rounds must agree
    ("sdpa", 2, "gelu", 12, 0),
    ("sdpa", 1, "tanh", 12, 0),       # gated with signed weights (odd φ): rounds must agree
    ("value", 1, "tanh", 12, 0),
    ("value", 2, "tanh", 12, 0),
    ("value", 1, "sigmoid", 1, 0),   # one gated head otherwise (N = 2): one round
    ("sdpa", 1, "silu", 1, 0),
    ("none", 1, "sigmoid", 12, 3),    # one MHA head: 3 of 4 agreeing starts end round 1
    ("none", 2, "sigmoid", 12, 0),    # several MHA heads: rounds must agree
    ("output", 1, "tanh", 12, 3),     # one G5 head: 3 of 4 agreeing starts end round 1
    ("output", 2, "sigmoid", 12, 0),  # several G5 heads
])
def test_auto_search_rounds_is_the_documented_count(gate, n_heads, activation, rounds, first):
    # starts stopped after 2 iterations end apart, so the optimum is never found twice and
    # the search runs until its cap: "auto" must run exactly the documented count, fit as
    # the explicit count does, and one round fewer than a cap one higher
    assert schedule_of(gate, n_heads, activation).first_round_agree == first
    X, y = make_hmoe_regression(200, n_features=2, n_heads=n_heads, gate=gate,
                                activation=activation, noise=0.05, random_state=4)
    kw = dict(n_heads=n_heads, n_experts=1, gate=gate, activation=activation, n_starts=1,
              max_iter=2, random_state=0)

    def search(**knobs):
        return Search(n_candidates=4, race_iter=1, moves=[], **knobs)

    auto = _fit(X, y, solver=search(), **kw)
    explicit = _fit(X, y, solver=search(rounds=rounds), **kw)
    more = _fit(X, y, solver=search(rounds=rounds + 1), **kw)
    # the premise: no two rounds agreed, so none stopped the search
    assert auto.n_starts_agreeing_ == auto.n_rounds_agreeing_ == 1
    assert auto.schedule_["rounds"] == rounds and auto.search_stop_ == "rounds"
    assert auto.search_rounds_ == explicit.search_rounds_ == rounds
    np.testing.assert_array_equal(auto.theta_, explicit.theta_)
    assert auto.n_kernel_passes_ == explicit.n_kernel_passes_
    assert more.search_rounds_ == rounds + 1
    assert more.n_kernel_passes_ > auto.n_kernel_passes_


def test_rounds_to_stop():
    # two agreeing rounds stop the search, for every model (the starts of one race can all
    # fall in one wrong basin: agreement counts independent rounds only)
    for gate in ("value", "sdpa", "none", "output"):
        for act in ("sigmoid", "tanh", "gelu", "silu"):
            for heads in (1, 2):
                assert schedule_of(gate, heads, act).agree == 2
    assert schedule_of("value", 1, "tanh", agree=5).agree == 5
    with pytest.raises(ValueError, match="gate"):
        schedule_of("bogus", 1, "tanh")
    with pytest.raises(ValueError, match="activation"):
        schedule_of("value", 1, "bogus")


def test_lbfgs_runs_one_round():
    X, y = make_hmoe_regression(200, n_features=2, n_heads=2, gate="value", random_state=0)
    kw = dict(n_heads=2, n_experts=1, gate="value", n_starts=2, max_iter=50, random_state=0)
    est = _fit(X, y, solver="lbfgs", **kw)
    assert est.search_rounds_ == 1 and est.start_objectives_.shape == (2,)
    assert est.schedule_["rounds"] == 1 and est.search_stop_ == "rounds"
    # rounds given explicitly to a search around L-BFGS-B are run (the "auto" is one)
    more = _fit(X, y, solver=Search(local="lbfgs", rounds=2, agree=3), **kw)
    assert more.search_rounds_ == 2 and more.start_objectives_.shape == (4,)
    np.testing.assert_array_equal(more.start_objectives_[:2], est.start_objectives_)


def test_search_rounds_schedule():
    # up to 12 rounds with LM, until two rounds agree; a majority of agreeing starts ends the
    # first round of one MHA or G5 head; one value/SDPA head with N = 2 and no tanh: one round
    for gate in ("value", "sdpa"):
        for heads in (1, 2, 3):
            s = schedule_of(gate, heads, "tanh")
            assert (s.rounds, s.first_round_agree) == (12, 0)
            for act in ("sigmoid", "gelu", "silu"):
                s = schedule_of(gate, heads, act)
                assert (s.rounds, s.first_round_agree) == (1 if heads == 1 else 12, 0)
                # more tokens, more ways to assign experts to gate regions
                for tokens in (3, 4):
                    s = schedule_of(gate, heads, act, n_tokens=tokens)
                    assert (s.rounds, s.first_round_agree) == (12, 0)
            # L-BFGS-B: one round
            s = schedule_of(gate, heads, "tanh", local="lbfgs")
            assert (s.rounds, s.first_round_agree) == (1, 0)
    for gate in ("none", "output"):
        for act in ("sigmoid", "tanh"):
            # several MHA or G5 heads can all settle in one wrong basin: rounds must agree
            s = schedule_of(gate, 2, act)
            assert (s.rounds, s.first_round_agree) == (12, 0)
            s = schedule_of(gate, 1, act, n_tokens=4)
            assert (s.rounds, s.first_round_agree) == (12, 3)
            # a majority of the starts, at least two (one start never agrees with another)
            for n_starts, first in [(1, 2), (2, 2), (3, 2), (4, 3), (8, 5)]:
                assert schedule_of(gate, 1, act, n_starts=n_starts).first_round_agree == first
            assert schedule_of(gate, 2, act, local="lbfgs").rounds == 1
    # rounds given: exactly those, agreement between rounds only (no first-round stop, where
    # "auto" would have one), for one head and for several
    for gate, heads in [("none", 1), ("output", 1), ("value", 2)]:
        s = schedule_of(gate, heads, rounds=3)
        assert (s.rounds, s.first_round_agree) == (3, 0)
    with pytest.raises(ValueError, match="gate"):
        schedule_of("bogus", 2, "tanh")
    with pytest.raises(ValueError, match="activation"):
        schedule_of("value", 2, "bogus")


def test_the_first_round_is_enough_when_its_starts_agree_and_only_then():
    # one MHA head (its first round may be enough): a round whose starts agree (3 of 4) ends
    # the search ("starts"), otherwise fresh rounds follow until two rounds agree; the first
    # round is the same either way
    X, y = make_hmoe_regression(1000, n_tokens=4, n_features=2, n_experts=2, gate="none",
                                noise=0.1, random_state=3)
    stops = {}
    for seed in range(4):
        kw = dict(n_tokens=4, n_experts=3, gate="none", random_state=seed)
        auto = _fit(X, y, solver=Search(n_candidates=16), **kw)
        one = _fit(X, y, solver=Search(n_candidates=16, rounds=1), **kw)
        np.testing.assert_array_equal(auto.start_objectives_[:4], one.start_objectives_)
        first = count_agreeing(one.start_objectives_, len(y))
        if first >= auto.schedule_["first_round_agree"]:
            assert auto.search_stop_ == "starts" and auto.search_rounds_ == 1
            np.testing.assert_array_equal(auto.theta_, one.theta_)
        else:
            assert auto.search_rounds_ >= 2 and auto.search_stop_ in ("agreement", "rounds")
            assert auto.objective_ <= one.objective_
        stops[auto.search_stop_] = stops.get(auto.search_stop_, 0) + 1
    # both branches occur on these seeds
    assert stops.get("starts", 0) >= 1 and len(stops) >= 2, stops


@pytest.mark.parametrize("value", [0, -1, 1.5, "many", None, True])
def test_search_rounds_is_validated(value):
    X, y = make_hmoe_regression(50, random_state=0)
    with pytest.raises(ValueError, match="rounds must be 'auto' or an integer >= 1"):
        HMoERegressor(solver=Search(rounds=value)).fit(X, y)
