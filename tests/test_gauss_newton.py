"""The bounded Levenberg–Marquardt solver, the racing / signed-weight search
(:class:`~hmoe_estim.solvers.Search`), the estimator's ``solver`` switch and its agreement count,
and the ``"auto"`` schedule of the race (:meth:`Search.schedule`)."""

import warnings

import numpy as np
import pytest

from hmoe_estim import (
    HMoERegressor,
    MixingMeasure,
    make_hmoe_regression,
    regression_function,
)
from hmoe_estim.model import make_bounds, n_params, pack
from hmoe_estim.solvers import (
    HeadRestarts,
    LevenbergMarquardt,
    Search,
    count_agreeing,
    has_sign_symmetry,
    levenberg_marquardt,
)

from .problems import make_problem, schedule_of
from .reference import random_arrays


def _problem(gate="value", activation="sigmoid", n=600, noise=0.0, seed=0, D=2):
    X, y, G = make_hmoe_regression(n, n_features=D, gate=gate, activation=activation,
                                   noise=noise, random_state=seed, return_measure=True)
    XT = np.require(X.T, requirements=["C", "W"])
    return X, XT, np.ascontiguousarray(y, dtype=float), G


@pytest.mark.parametrize("gate", ["none", "value", "sdpa", "output"])
def test_lm_from_near_the_truth_reaches_zero_residual(gate):
    X, XT, y, G = _problem(gate=gate)
    shape = G.shape
    lower, upper = make_bounds(shape, omega_max=10.0, param_bound=10.0)
    theta0 = pack(G) + 0.05 * np.random.default_rng(1).normal(size=n_params(*shape))
    res = levenberg_marquardt(theta0, XT, y, shape, gate, "sigmoid", lower, upper,
                              max_iter=200, tol=1e-12)
    assert res.converged, res.message
    assert res.objective < 1e-12 * np.mean(y ** 2)
    assert res.n_passes == res.n_jac + res.n_fev > 0
    assert np.all(res.theta >= lower) and np.all(res.theta <= upper)


def test_lm_respects_the_box_and_fits_an_offset():
    X, XT, y, G = _problem(gate="none", noise=0.01)
    shape = G.shape
    lower, upper = make_bounds(shape, omega_max=10.0, param_bound=1.0)  # truth outside
    theta0 = np.clip(pack(G), lower, upper) * 0.5
    res = levenberg_marquardt(theta0, XT, y + 3.0, shape, "none", "sigmoid", lower, upper,
                              max_iter=300, fit_offset=True)
    assert np.all(res.theta >= lower) and np.all(res.theta <= upper)
    assert np.any(res.theta == upper) or np.any(res.theta == lower)  # a bound is active
    assert res.offset == pytest.approx(3.0, abs=0.5)
    assert np.isfinite(res.objective)


def test_lm_start_with_non_finite_objective_ends_with_a_reason():
    shape = (1, 2, 1, 2)
    XT = np.full((2, 10), 1e200)
    y = np.zeros(10)
    lower, upper = make_bounds(shape, omega_max=10.0, param_bound=10.0)
    theta0 = np.ones(n_params(*shape))
    res = levenberg_marquardt(theta0, XT, y, shape, "none", "sigmoid", lower, upper)
    assert not res.converged and "not finite" in res.message
    assert res.objective == np.inf and np.all(np.isfinite(res.theta))


@pytest.mark.parametrize("gate,activation", [("none", "sigmoid"), ("output", "gelu"),
                                             ("value", "tanh"), ("sdpa", "tanh")])
def test_fold_signs_keeps_the_function(gate, activation):
    assert has_sign_symmetry(gate, activation)
    rng = np.random.default_rng(0)
    omega, M, a = random_arrays(1, 2, 3, 2, rng)
    omega[0, 1] = -0.8
    theta = pack(MixingMeasure(omega, M, a))
    X = rng.uniform(-1, 1, size=(50, 2))
    problem = make_problem(X, np.zeros(50), (1, 2, 3, 2), gate, activation)
    assert problem.sign_symmetric
    folded = problem.fold(theta)
    assert np.all(folded[:3] >= 0)
    from hmoe_estim.model import unpack

    f0 = regression_function(unpack(theta, (1, 2, 3, 2)), X, gate=gate, activation=activation)
    f1 = regression_function(unpack(folded, (1, 2, 3, 2)), X, gate=gate, activation=activation)
    np.testing.assert_allclose(f0, f1, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("gate,activation", [("value", "sigmoid"), ("sdpa", "gelu"),
                                             ("value", "silu")])
def test_no_sign_symmetry_without_an_odd_activation(gate, activation):
    assert not has_sign_symmetry(gate, activation)
    problem = make_problem(np.zeros((4, 2)), np.zeros(4), (1, 2, 1, 2), gate, activation)
    assert not problem.sign_symmetric
    # ... so the "auto" search keeps omega >= 0
    assert not Search().schedule(problem).signed


def test_count_agreeing():
    assert count_agreeing([1.0, 1.0 + 0.5 / 100, 1.0 + 2 / 100, np.inf], 100) == 2
    assert count_agreeing([np.nan, np.inf], 10) == 0


def _race(problem, starts, *, n_keep, race_iter, max_iter, tol=1e-9, signed=False,
          race_samples="auto"):
    """The race of one search round alone (no moves): ``starts`` raced, the ``n_keep`` best
    run to convergence. Returns ``(results, race_passes)``, the race's passes in passes over
    the full data (the finished starts count only their passes after the race)."""
    search = Search(local=LevenbergMarquardt(max_iter=max_iter, tol=tol), n_starts=n_keep,
                    n_candidates=len(starts), race_iter=race_iter, race_samples=race_samples,
                    rounds=1, moves=[], signed=signed)
    found = search.run(problem, None, starts)
    assert found.rounds == 1 and found.move_rounds == {"restart": 0, "local": 0}
    return found.results, found.n_passes - sum(r.n_passes for r in found.results)


def test_race_keeps_the_best_candidates():
    X, XT, y, G = _problem(gate="value", noise=0.05, n=800)
    shape = (1, 2, 3, 2)
    rng = np.random.default_rng(0)
    problem = make_problem(XT, y, shape, "value", transposed=True)
    bounds = problem.lower, problem.upper
    from hmoe_estim.model import random_start

    starts = [np.clip(pack(random_start(shape, rng)), *bounds) for _ in range(6)]
    results, abandoned = _race(problem, starts, n_keep=2, race_iter=3, max_iter=100)
    assert len(results) == 2 and abandoned > 0
    assert all(np.all(r.theta >= bounds[0]) for r in results)
    # the two best of the race, resumed: the others were abandoned
    assert all(r.n_iter > 0 and np.isfinite(r.objective) for r in results)


def test_estimator_solver_switch_and_agreement():
    X, y = make_hmoe_regression(400, n_features=2, gate="value", noise=0.05, random_state=0)
    kw = dict(n_experts=2, gate="value", n_starts=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = HMoERegressor(**kw).fit(X, y)
        lb = HMoERegressor(solver="lbfgs", **kw).fit(X, y)
    for est in (lm, lb):
        assert est.start_objectives_.shape == (3,)
        assert 1 <= est.n_starts_agreeing_ <= 3
        assert est.n_kernel_passes_ > 0
        assert np.all(np.isfinite(est.measure_.a))
    assert lm.objective_ <= lb.objective_ + 1e-6


@pytest.mark.parametrize("params,match", [
    (dict(solver="newton"), "Unknown solver 'newton'.*'lm'.*'lbfgs'"),
    (dict(solver=Search(n_candidates=2)), "n_candidates=2 is smaller than n_starts=4"),
    (dict(solver=Search(n_candidates=4), n_starts=5),
     "n_candidates=4 is smaller than n_starts=5"),
    (dict(solver=Search(n_candidates="many")), "n_candidates must be 'auto' or an integer"),
    (dict(solver=Search(race_iter=-1)), "race_iter must be 'auto' or an integer >= 1"),
])
def test_estimator_validates_search_parameters(params, match):
    X, y = make_hmoe_regression(50, random_state=0)
    with pytest.raises(ValueError, match=match):
        HMoERegressor(**params).fit(X, y)


def test_lm_fit_does_not_depend_on_the_thread_count():
    import numba

    X, y = make_hmoe_regression(3000, n_features=2, gate="sdpa", noise=0.05, random_state=1)
    kw = dict(n_experts=2, gate="sdpa", n_starts=2, solver=Search(n_candidates=4),
              random_state=0)
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = HMoERegressor(**kw).fit(X, y)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = HMoERegressor(**kw).fit(X, y)
    finally:
        numba.set_num_threads(old)
    np.testing.assert_array_equal(one.theta_, two.theta_)
    assert one.objective_ == two.objective_


@pytest.mark.parametrize("gate,n_heads,expected", [
    ("none", 1, 16 * 2),      # ungated MHA: 16 per start and head
    ("none", 2, 16 * 2 * 2),
    ("value", 1, 32 * 2),     # gated: 32 per start
])
def test_auto_candidates_are_the_documented_counts(gate, n_heads, expected):
    # n_candidates="auto" must be the same fit as the documented count given explicitly
    # (the same random stream), and not the same as the other rule's count
    X, y = make_hmoe_regression(300, n_features=2, gate=gate, noise=0.05, random_state=3)
    kw = dict(n_heads=n_heads, n_experts=2, gate=gate, n_starts=2, max_iter=30, random_state=0)
    _assert_auto_is(X, y, kw, dict(moves=[]), "n_candidates", expected, expected + 8)


@pytest.mark.parametrize("gate,n_heads,expected", [
    ("value", 2, 30),   # gated, several heads: the long race
    ("sdpa", 2, 30),
    ("none", 2, 30),    # several heads, whatever the gate
    ("value", 1, 10),   # one head
    ("none", 1, 10),
])
def test_auto_race_iter_is_the_documented_count(gate, n_heads, expected):
    X, y = make_hmoe_regression(200, n_features=2, n_heads=n_heads, gate=gate, noise=0.05,
                                random_state=4)
    kw = dict(n_heads=n_heads, n_experts=1, gate=gate, n_starts=2, max_iter=40, random_state=0)
    _assert_auto_is(X, y, kw, dict(n_candidates=12, moves=[]), "race_iter", expected,
                    expected + 6)


def _assert_auto_is(X, y, kw, search_kw, name, expected, other):
    """The search's ``name="auto"`` (the default) fits exactly as ``name=expected`` given
    explicitly (the same random stream), and not as ``name=other``."""
    def fit(**knob):
        return HMoERegressor(solver=Search(**search_kw, **knob), **kw).fit(X, y)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = fit()
        explicit = fit(**{name: expected})
        different = fit(**{name: other})
    assert auto.schedule_[name] == explicit.schedule_[name] == expected
    np.testing.assert_array_equal(auto.theta_, explicit.theta_)
    assert auto.n_kernel_passes_ == explicit.n_kernel_passes_
    assert auto.n_kernel_passes_ != different.n_kernel_passes_


def test_race_schedule():
    # (race_iter, race_samples) of "auto": 30 iterations for several heads, or one head
    # behind a value/SDPA gate with tanh or N >= 3, otherwise 10; on 4096 samples, 1024 for
    # MHA (its candidates are nearly converged after the race)
    for gate, heads in [("value", 2), ("sdpa", 3)]:
        s = schedule_of(gate, heads)
        assert (s.race_iter, s.race_samples) == (30, 4096)
    for gate, heads in [("value", 1), ("sdpa", 1)]:
        s = schedule_of(gate, heads)
        assert (s.race_iter, s.race_samples) == (10, 4096)
        s = schedule_of(gate, heads, "tanh")
        assert (s.race_iter, s.race_samples) == (30, 4096)
        for tokens in (3, 5):
            s = schedule_of(gate, heads, "gelu", n_tokens=tokens)
            assert (s.race_iter, s.race_samples) == (30, 4096)
    for heads, race_iter in [(1, 10), (2, 30)]:
        for tokens in (2, 5):  # the linear gates: N does not lengthen the race
            s = schedule_of("none", heads, n_tokens=tokens)
            assert (s.race_iter, s.race_samples) == (race_iter, 1024)
            s = schedule_of("output", heads, n_tokens=tokens)
            assert (s.race_iter, s.race_samples) == (race_iter, 4096)
    # each knob given explicitly leaves the other's rule alone
    s = schedule_of("value", 2, race_iter=10)
    assert (s.race_iter, s.race_samples) == (10, 4096)
    s = schedule_of("value", 2, race_samples=2048)
    assert (s.race_iter, s.race_samples) == (30, 2048)
    with pytest.raises(ValueError, match="gate"):
        schedule_of("bogus", 2)


def test_candidates_and_head_restarts_schedules():
    # the documented "auto" counts: 32 per start kept, 16 per start and head for MHA
    assert schedule_of("value", 2, n_starts=4).n_candidates == 128
    assert schedule_of("sdpa", 1, n_starts=2).n_candidates == 64
    assert schedule_of("output", 3, n_starts=4).n_candidates == 128
    assert schedule_of("none", 1, n_starts=4).n_candidates == 64
    assert schedule_of("none", 2, n_starts=4).n_candidates == 128
    assert schedule_of("value", 2, n_candidates=7).n_candidates == 7
    # L-BFGS-B: no race, one round, no moves, unsigned weights
    s = schedule_of("none", 2, n_starts=3, local="lbfgs")
    assert (s.n_candidates, s.rounds, s.moves, s.signed) == (3, 1, [], False)
    # head restarts: none with one head (a restarted head is a fresh start), 32 per head
    # and round with several
    assert schedule_of("value", 1).moves == []
    for heads in (2, 3):
        moves = schedule_of("value", heads).moves
        assert [type(m) for m in moves] == [HeadRestarts]
        assert moves[0].per_head == 32
    assert schedule_of("value", 1).move_rounds == schedule_of("value", 2).move_rounds == 10


@pytest.mark.parametrize("race_samples", ["auto", 1024])
def test_race_runs_on_race_samples(race_samples):
    # the race's passes, in full-data units, are whole passes over its subsample: 1024 of
    # the 3000 samples when asked, all of them by default (4096 > 3000 with an explicit
    # race_iter)
    from hmoe_estim.model import random_start

    shape = (2, 2, 1, 2)
    X, y = make_hmoe_regression(3000, n_features=2, n_heads=2, n_experts=1, gate="value",
                                noise=0.05, random_state=5)
    problem = make_problem(X, y, shape, "value")
    bounds = problem.lower, problem.upper
    rng = np.random.RandomState(0)
    starts = [np.clip(pack(random_start(shape, rng)), *bounds) for _ in range(8)]
    assert Search(race_iter=2).schedule(problem).race_samples == 4096 > 3000
    _, passes = _race(problem, starts, n_keep=2, race_iter=2, max_iter=5,
                      race_samples=race_samples)
    m = 3000 if race_samples == "auto" else race_samples
    k = passes * 3000 / m
    assert k > 0 and abs(k - round(k)) < 1e-9
    assert (abs(passes - round(passes)) > 1e-6) == (m < 3000)


@pytest.mark.parametrize("gate,race_iter,expected", [
    ("value", "auto", (30, 3000)), ("none", "auto", (30, 1024)), ("none", 10, (10, 1024))])
def test_estimator_races_on_its_schedule(monkeypatch, gate, race_iter, expected):
    # the race and the head restarts' races both run on the schedule: "auto" the long race of
    # several heads, on 4096 samples (here all 3000) or MHA's 1024; an explicit count its
    # iterations on the gate's subsample
    seen = []
    real = LevenbergMarquardt.solve

    def recording(self, problem, starts, **kw):
        seen.append((kw.get("max_iter"), problem.n_samples))
        return real(self, problem, starts, **kw)

    monkeypatch.setattr(LevenbergMarquardt, "solve", recording)
    X, y = make_hmoe_regression(3000, n_features=2, n_heads=2, n_experts=1, gate=gate,
                                noise=0.05, random_state=6)
    search = Search(n_candidates=8, moves=[HeadRestarts(per_head=2)], race_iter=race_iter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = HMoERegressor(n_heads=2, n_experts=1, gate=gate, n_starts=2, solver=search,
                            max_iter=20, random_state=0).fit(X, y)
    assert (est.schedule_["race_iter"], min(est.schedule_["race_samples"], 3000)) == expected
    # every round races its candidates, then at least one round of head restarts
    assert len(seen) >= 2 * est.search_rounds_
    assert all(s == expected for s in seen)
