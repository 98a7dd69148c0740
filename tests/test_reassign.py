"""Moves of the global search: expert reassignment (``solvers._search.reassign_experts``)
and soft-mode steps (``soft_mode_moves``), the estimator's ``reassign_experts``."""

import itertools
import math
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
from hmoe_estim.model import make_bounds, n_params, pack, unpack
from hmoe_estim.solvers._gauss_newton import levenberg_marquardt
from hmoe_estim.solvers._search import (
    REASSIGN_ALL_PERMUTATIONS,
    SOFT_MODES,
    SOFT_STEPS,
    reassign_experts,
    reassign_schedule,
    reassignments,
    soft_mode_moves,
    soft_mode_steps,
)


def _expected_count(H, N, K):
    """Candidates of ``reassignments``, counted from its definition."""
    perms = (math.factorial(N) - 1 if N <= REASSIGN_ALL_PERMUTATIONS else N * (N - 1) // 2)
    per_head = perms
    if K >= 2:
        per_head += K * perms + (N * K * (K - 1) // 2 if N >= 2 else 0)
    return H * per_head


@pytest.mark.parametrize("shape", [(1, 2, 2, 2), (1, 2, 1, 3), (2, 3, 2, 2), (2, 2, 3, 2),
                                   (1, 5, 2, 2)])
@pytest.mark.parametrize("intercept", [False, True])
def test_reassignments_move_experts_only_and_keep_each_head_s_experts(shape, intercept):
    H, N, K, D = shape
    G = random_measure(H, N, K, D, random_state=1)
    theta = pack(G)
    if intercept:  # the estimator's layout with an intercept: one more entry, kept
        theta = np.append(theta, 0.7)
    cands = reassignments(theta, shape)
    assert len(cands) == _expected_count(H, N, K)
    P = n_params(*shape)
    seen = set()
    for t in cands:
        assert t.shape == theta.shape and t is not theta
        if intercept:
            assert t[-1] == 0.7
        C = unpack(t[:P], shape)
        np.testing.assert_array_equal(C.omega, G.omega)
        np.testing.assert_array_equal(C.M, G.M)
        changed = [h for h in range(H) if not np.array_equal(C.a[h], G.a[h])]
        assert len(changed) == 1  # one head's experts moved, every other entry kept
        h = changed[0]
        # the head keeps its experts (the same vectors, in other places)
        before = sorted(map(tuple, G.a[h].reshape(-1, D)))
        after = sorted(map(tuple, C.a[h].reshape(-1, D)))
        assert before == after
        seen.add(t.tobytes())
    assert len(seen) == len(cands)  # no candidate twice
    theta_copy = theta.copy()
    reassignments(theta, shape)
    np.testing.assert_array_equal(theta, theta_copy)  # the incumbent is not modified


def test_reassignments_include_every_token_permutation_of_a_head():
    shape = (1, 3, 1, 2)  # K = 1: only whole-head permutations, all N! - 1 of them
    G = random_measure(*shape, random_state=2)
    cands = reassignments(pack(G), shape)
    got = {tuple(np.argmax(np.all(unpack(t, shape).a[0, :, 0][:, None] == G.a[0, :, 0][None],
                                  axis=2), axis=1)) for t in cands}
    want = {p for p in itertools.permutations(range(3)) if p != (0, 1, 2)}
    assert got == want


def test_permuting_experts_with_their_gates_is_a_symmetry_and_without_is_a_move():
    # why the moves permute a alone: with M permuted too (and the softmax gauge, M[N-1] = 0,
    # restored) f is unchanged, so only the experts' move reaches another function
    shape = (1, 3, 2, 2)
    G = random_measure(*shape, scale=2.0, random_state=3)
    X = np.random.RandomState(4).uniform(-1, 1, size=(300, 2))
    f = regression_function(G, X, gate="value", activation="tanh")
    p = [2, 0, 1]
    M = G.M[:, p] - G.M[:, p][:, -1:]
    both = MixingMeasure(G.omega, M, G.a[:, p])
    np.testing.assert_allclose(regression_function(both, X, gate="value", activation="tanh"),
                               f, rtol=1e-12, atol=1e-12)
    t = reassignments(pack(G), shape)[0]
    assert np.max(np.abs(regression_function(unpack(t, shape), X, gate="value",
                                             activation="tanh") - f)) > 1e-3


@pytest.mark.parametrize("gate, shape, truth_seed", [("value", (2, 3, 1, 2), 7),
                                                     ("sdpa", (1, 3, 2, 2), 10)])
def test_reassignment_repairs_experts_planted_in_the_wrong_tokens(gate, shape, truth_seed):
    # noiseless data from a truth; the fit starts from the truth with the experts of tokens 0
    # and 1 of head 0 exchanged, run to convergence: a local optimum (the objective stays far
    # above the noiseless floor, 0); the moves put experts back and the objective falls
    # more than a hundredfold. (Truths found by trying seeds: from most planted starts the
    # solver alone gets back.)
    H, N, K, D = shape
    G = random_measure(*shape, scale=2.0, random_state=truth_seed)
    X, y = make_hmoe_regression(600, measure=G, n_experts=K, n_features=D, gate=gate,
                                activation="tanh", noise=0.0, random_state=6)
    XT = np.ascontiguousarray(X.T)
    lower, upper = make_bounds(shape, omega_max=10.0, param_bound=10.0)
    a = G.a.copy()
    a[0, [0, 1]] = a[0, [1, 0]]
    planted = pack(MixingMeasure(G.omega, G.M, a))
    inc = levenberg_marquardt(planted, XT, y, shape, gate, "tanh", lower, upper, max_iter=300)
    assert inc.objective > 1e-4
    best, passes, rounds = reassign_experts(inc, XT, y, shape, gate, "tanh", (lower, upper),
                                            max_rounds=3, race_iter=6, max_iter=300, tol=1e-12,
                                            signed=True)
    assert rounds >= 1 and passes > 0
    assert best.objective < inc.objective / 100
    assert np.all(best.theta >= lower) and np.all(best.theta <= upper)


def test_reassign_schedule():
    assert reassign_schedule("value", "tanh", 2) and reassign_schedule("sdpa", "tanh", 3)
    assert not reassign_schedule("value", "tanh", 1)
    for gate, act in [("value", "sigmoid"), ("sdpa", "gelu"), ("none", "tanh"),
                      ("output", "tanh"), ("value", "silu")]:
        assert not reassign_schedule(gate, act, 2)
    with pytest.raises(ValueError, match="gate"):
        reassign_schedule("values", "tanh", 2)


@pytest.mark.parametrize("value", ["yes", 1, None, 0.0])
def test_reassign_experts_is_validated(value):
    X, y = make_hmoe_regression(50, random_state=0)
    with pytest.raises(ValueError, match="reassign_experts must be 'auto', True or False"):
        HMoERegressor(reassign_experts=value).fit(X, y)


def test_estimator_runs_the_moves_as_asked_and_reproducibly():
    X, y = make_hmoe_regression(300, n_heads=2, n_tokens=2, n_experts=1, n_features=2,
                                gate="value", activation="tanh", random_state=0)
    kw = dict(n_heads=2, n_tokens=2, n_experts=1, gate="value", activation="tanh", n_starts=2,
              n_candidates=4, head_restarts=2, search_rounds=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = HMoERegressor(reassign_experts=False, **kw).fit(X, y)
        on = HMoERegressor(**kw).fit(X, y)  # "auto": on for tanh with two heads
        again = HMoERegressor(**kw).fit(X, y)
        one_kw = dict(n_tokens=2, n_experts=1, gate="value", activation="tanh", n_starts=2,
                      n_candidates=4, random_state=0)
        one_head = HMoERegressor(reassign_experts=True, **one_kw).fit(X, y)
        one_head_off = HMoERegressor(reassign_experts=False, **one_kw).fit(X, y)
    assert off.reassign_rounds_ == 0
    assert on.objective_ <= off.objective_
    assert on.n_kernel_passes_ > off.n_kernel_passes_  # the moves were raced
    np.testing.assert_array_equal(on.theta_, again.theta_)
    assert on.reassign_rounds_ == again.reassign_rounds_
    # True runs the moves where "auto" would not (one head)
    assert one_head.n_kernel_passes_ > one_head_off.n_kernel_passes_
    assert one_head_off.reassign_rounds_ == 0 and np.isfinite(one_head.objective_)


def _fd_jacobian(theta, X, shape, gate, activation, h=1e-6):
    """Plain-NumPy central-difference Jacobian of ``f_theta`` on ``X`` (public
    ``regression_function``)."""
    cols = []
    for p in range(theta.size):
        e = np.zeros_like(theta)
        e[p] = h
        cols.append((regression_function(unpack(theta + e, shape), X, gate=gate,
                                         activation=activation)
                     - regression_function(unpack(theta - e, shape), X, gate=gate,
                                           activation=activation)) / (2 * h))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("gate, shape", [("value", (2, 2, 2, 2)), ("sdpa", (1, 3, 1, 2))])
@pytest.mark.parametrize("intercept", [False, True])
def test_soft_mode_steps_follow_the_softest_scaled_gauss_newton_directions(gate, shape,
                                                                           intercept):
    H, N, K, D = shape
    G = random_measure(*shape, scale=1.5, random_state=3)
    X, y = make_hmoe_regression(400, measure=G, n_experts=K, n_features=D, gate=gate,
                                activation="tanh", noise=0.1, random_state=4)
    theta = pack(random_measure(*shape, scale=1.5, random_state=5))
    full = np.append(theta, 0.3) if intercept else theta
    cands = soft_mode_steps(full, np.ascontiguousarray(X.T), y, shape, gate, "tanh")
    P = theta.size
    assert len(cands) == min(SOFT_MODES, P) * len(SOFT_STEPS) * 2
    steps = np.array([t[:P] - theta for t in cands])
    if intercept:  # the intercept is the offset of the residuals, never moved
        assert all(t[-1] == 0.3 for t in cands)
    # every step is ± s u with max |u| = 1, the lengths in SOFT_STEPS, per mode
    lengths = np.max(np.abs(steps), axis=1).reshape(-1, len(SOFT_STEPS), 2)
    np.testing.assert_allclose(lengths, np.broadcast_to(np.array(SOFT_STEPS)[:, None],
                                                        lengths.shape), rtol=1e-12)
    # the first direction is the softest eigenvector of D⁻¹JᵀJD⁻¹, from a finite-difference
    # Jacobian (the residual offset does not enter JᵀJ)
    J = _fd_jacobian(theta, X, shape, gate, "tanh")
    A = J.T @ J
    d = np.sqrt(np.diag(A))
    w, V = np.linalg.eigh(A / np.outer(d, d))
    assert w[1] > 1.5 * w[0]  # a well-separated softest mode, so the comparison is sharp
    u = V[:, 0] / d
    u /= np.max(np.abs(u))
    first = steps[0] / SOFT_STEPS[0]
    assert min(np.max(np.abs(first - u)), np.max(np.abs(first + u))) < 1e-4
    # soft means soft: the first direction changes f less, per scaled step, than the last
    def rayleigh(v):
        return (v * d) @ (A / np.outer(d, d)) @ (v * d) / ((v * d) @ (v * d))
    last = steps[-1] / SOFT_STEPS[-1]
    assert rayleigh(first) <= rayleigh(last) + 1e-12


def test_soft_mode_moves_never_raise_the_objective_and_stay_in_the_box():
    shape = (2, 2, 1, 2)
    G = random_measure(*shape, scale=2.0, random_state=2)
    X, y = make_hmoe_regression(500, measure=G, n_experts=1, n_features=2, gate="value",
                                activation="tanh", noise=0.05, random_state=3)
    XT = np.ascontiguousarray(X.T)
    lower, upper = make_bounds(shape, omega_max=10.0, param_bound=10.0)
    start = pack(random_measure(*shape, scale=2.0, random_state=9))
    inc = levenberg_marquardt(start, XT, y, shape, "value", "tanh", lower, upper, max_iter=200)
    best, passes, rounds = soft_mode_moves(inc, XT, y, shape, "value", "tanh", (lower, upper),
                                           max_rounds=2, race_iter=6, max_iter=200, tol=1e-10,
                                           signed=False)
    # here the moves do move (so the box is checked on a moved point), and only downhill
    assert passes > 0 and rounds >= 1
    assert best.objective < inc.objective
    assert np.all(best.theta >= lower) and np.all(best.theta <= upper)
    assert np.all(np.isfinite(best.theta))
