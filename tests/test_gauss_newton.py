"""The bounded Levenberg–Marquardt solver, the racing / signed-weight search, the estimator's
``solver`` switch and its agreement count."""

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
from hmoe_estim.solvers._gauss_newton import levenberg_marquardt
from hmoe_estim.solvers._search import count_agreeing, fold_signs, has_sign_symmetry, race

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
    folded = fold_signs(theta, (1, 2, 3, 2))
    assert np.all(folded[:3] >= 0)
    X = rng.uniform(-1, 1, size=(50, 2))
    from hmoe_estim.model import unpack

    f0 = regression_function(unpack(theta, (1, 2, 3, 2)), X, gate=gate, activation=activation)
    f1 = regression_function(unpack(folded, (1, 2, 3, 2)), X, gate=gate, activation=activation)
    np.testing.assert_allclose(f0, f1, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("gate,activation", [("value", "sigmoid"), ("sdpa", "gelu"),
                                             ("value", "silu")])
def test_no_sign_symmetry_without_an_odd_activation(gate, activation):
    assert not has_sign_symmetry(gate, activation)


def test_count_agreeing():
    assert count_agreeing([1.0, 1.0 + 0.5 / 100, 1.0 + 2 / 100, np.inf], 100) == 2
    assert count_agreeing([np.nan, np.inf], 10) == 0


def test_race_keeps_the_best_candidates():
    X, XT, y, G = _problem(gate="value", noise=0.05, n=800)
    shape = (1, 2, 3, 2)
    rng = np.random.default_rng(0)
    bounds = make_bounds(shape, omega_max=10.0, param_bound=10.0)
    from hmoe_estim.model import random_start

    starts = [np.clip(pack(random_start(shape, rng)), *bounds) for _ in range(6)]
    results, kept, abandoned = race(starts, XT, y, shape, "value", "sigmoid", bounds, n_keep=2,
                                    race_iter=3, max_iter=100, tol=1e-9, signed=False)
    assert len(results) == 2 and len(kept) == 2 and abandoned > 0
    assert all(np.all(r.theta >= bounds[0]) for r in results)


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
    (dict(n_candidates=2), "n_candidates=2 is smaller than n_starts=4"),
    (dict(n_candidates="many"), "n_candidates must be 'auto' or an integer"),
    (dict(race_iter=0), "race_iter must be 'auto' or an integer >= 1"),
])
def test_estimator_validates_search_parameters(params, match):
    X, y = make_hmoe_regression(50, random_state=0)
    with pytest.raises(ValueError, match=match):
        HMoERegressor(**params).fit(X, y)


def test_lm_fit_does_not_depend_on_the_thread_count():
    import numba

    X, y = make_hmoe_regression(3000, n_features=2, gate="sdpa", noise=0.05, random_state=1)
    kw = dict(n_experts=2, gate="sdpa", n_starts=2, n_candidates=4, random_state=0)
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
    kw = dict(n_heads=n_heads, n_experts=2, gate=gate, n_starts=2, max_iter=30,
              head_restarts=0, random_state=0)
    _assert_auto_is(X, y, kw, "n_candidates", expected, expected + 8)


@pytest.mark.parametrize("gate,n_heads,expected", [
    ("value", 2, 30),   # gated, several heads: the long race
    ("sdpa", 2, 30),
    ("value", 1, 10),   # one head
    ("none", 2, 10),    # linear gate
])
def test_auto_race_iter_is_the_documented_count(gate, n_heads, expected):
    X, y = make_hmoe_regression(200, n_features=2, n_heads=n_heads, gate=gate, noise=0.05,
                                random_state=4)
    kw = dict(n_heads=n_heads, n_experts=1, gate=gate, n_starts=2, n_candidates=12,
              max_iter=40, head_restarts=0, random_state=0)
    _assert_auto_is(X, y, kw, "race_iter", expected, expected + 6)


def _assert_auto_is(X, y, kw, name, expected, other):
    """``name="auto"`` (the default) fits exactly as ``name=expected`` given explicitly (the
    same random stream), and not as ``name=other``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = HMoERegressor(**kw).fit(X, y)
        explicit = HMoERegressor(**{name: expected}, **kw).fit(X, y)
        different = HMoERegressor(**{name: other}, **kw).fit(X, y)
    np.testing.assert_array_equal(auto.theta_, explicit.theta_)
    assert auto.n_kernel_passes_ == explicit.n_kernel_passes_
    assert auto.n_kernel_passes_ != different.n_kernel_passes_


def test_race_schedule():
    from hmoe_estim.solvers import _search

    long = (_search.RACE_ITER_HEADS, _search.RACE_SAMPLES_HEADS)
    assert long == (30, 1024)
    assert _search.race_schedule("value", 2) == long
    assert _search.race_schedule("sdpa", 3) == long
    for gate, heads in [("value", 1), ("sdpa", 1), ("none", 2), ("output", 2)]:
        assert _search.race_schedule(gate, heads) == (10, None)
    with pytest.raises(ValueError, match="gate"):
        _search.race_schedule("bogus", 2)


def test_candidates_and_head_restarts_schedules():
    from hmoe_estim.solvers import _search

    # the documented "auto" counts: 32 per start kept, 16 per start and head for MHA
    assert _search.candidates_schedule("value", 4, 2) == 128
    assert _search.candidates_schedule("sdpa", 2, 1) == 64
    assert _search.candidates_schedule("output", 4, 3) == 128
    assert _search.candidates_schedule("none", 4, 1) == 64
    assert _search.candidates_schedule("none", 4, 2) == 128
    with pytest.raises(ValueError, match="gate"):
        _search.candidates_schedule("bogus", 4, 1)
    assert _search.head_restarts_schedule(1) == 0
    assert _search.head_restarts_schedule(2) == _search.head_restarts_schedule(3) == 32


@pytest.mark.parametrize("race_samples", [None, 1024])
def test_race_runs_on_race_samples(race_samples):
    # the race's passes, in full-data units, are whole passes over its subsample: 1024 of
    # the 3000 samples when asked, all of them by default (RACE_SAMPLES > 3000)
    from hmoe_estim.model import make_bounds, pack, random_start
    from hmoe_estim.solvers import _search

    shape = (2, 2, 1, 2)
    X, y = make_hmoe_regression(3000, n_features=2, n_heads=2, n_experts=1, gate="value",
                                noise=0.05, random_state=5)
    XT = np.require(X.T, requirements=["C", "W"])
    bounds = make_bounds(shape, omega_max=10.0, param_bound=10.0)
    rng = np.random.RandomState(0)
    starts = [np.clip(pack(random_start(shape, rng)), *bounds) for _ in range(8)]
    _, _, passes = _search.race(starts, XT, y, shape, "value", "sigmoid", bounds, n_keep=2,
                                race_iter=2, max_iter=5, tol=1e-9, signed=False,
                                race_samples=race_samples)
    m = 3000 if race_samples is None else race_samples
    assert _search.RACE_SAMPLES > 3000
    k = passes * 3000 / m
    assert k > 0 and abs(k - round(k)) < 1e-9
    assert (abs(passes - round(passes)) > 1e-6) == (m < 3000)


@pytest.mark.parametrize("race_iter,expected", [("auto", (30, 1024)), (10, (10, None))])
def test_estimator_races_on_its_schedule(monkeypatch, race_iter, expected):
    # the race and the head restarts both get the schedule: "auto" the long race of several
    # gated heads, an explicit count its iterations on the default subsample
    import hmoe_estim.estimators._regressor as reg

    seen = []

    def recording(fn):
        def wrapper(*args, **kw):
            seen.append((fn.__name__, kw["race_iter"], kw["race_samples"]))
            return fn(*args, **kw)
        return wrapper

    monkeypatch.setattr(reg, "race", recording(reg.race))
    monkeypatch.setattr(reg, "restart_heads", recording(reg.restart_heads))
    X, y = make_hmoe_regression(200, n_features=2, n_heads=2, n_experts=1, gate="value",
                                noise=0.05, random_state=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = HMoERegressor(n_heads=2, n_experts=1, gate="value", n_starts=2, n_candidates=8,
                            head_restarts=2, max_iter=20, race_iter=race_iter,
                            random_state=0).fit(X, y)
    # (every round of the search races, then restarts heads)
    assert [name for name, _, _ in seen] == ["race", "restart_heads"] * est.search_rounds_
    assert all((it, m) == expected for _, it, m in seen)
