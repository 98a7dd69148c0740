"""Moves of the global search: expert reassignment (:class:`~hmoe_estim.solvers.ExpertReassignment`)
and soft-mode steps (:class:`~hmoe_estim.solvers.SoftModes`), and the moves the estimator's
search runs ("auto": with the value and SDPA gates, tanh and several heads)."""

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
from hmoe_estim.model import n_params, pack, unpack
from hmoe_estim.solvers import (
    ExpertReassignment,
    HeadRestarts,
    LevenbergMarquardt,
    Search,
    SoftModes,
)

from .problems import make_problem, schedule_of

#: The defaults of the moves.
REASSIGN_ALL_PERMUTATIONS = ExpertReassignment().all_permutations_up_to
SOFT_MODES = SoftModes().n_modes
SOFT_STEPS = tuple(SoftModes().steps)


def _no_draw():
    raise AssertionError("this move draws no random start")


def reassignments(theta, shape):
    """The candidates of :class:`ExpertReassignment` of ``theta`` (an intercept last when
    ``theta`` has one more entry than the measure)."""
    D = shape[3]
    problem = make_problem(np.zeros((4, D)), np.zeros(4), shape, "value", "tanh",
                           fit_intercept=len(theta) > n_params(*shape))
    return ExpertReassignment().propose(problem, theta, _no_draw)


def _expected_count(H, N, K):
    """Candidates of ``reassignments``, counted from its definition."""
    assert REASSIGN_ALL_PERMUTATIONS == 4
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


@pytest.mark.parametrize("gate, shape, truth_seed", [("value", (2, 3, 1, 2), 17),
                                                     ("sdpa", (1, 3, 2, 2), 8)])
def test_reassignment_repairs_experts_planted_in_the_wrong_tokens(gate, shape, truth_seed):
    # noiseless data from a truth; the fit starts from the truth with the experts of tokens 0
    # and 1 of head 0 exchanged, run to convergence by a search with signed weights and no
    # move: a local optimum (the objective stays far above the noiseless floor, ~1e-30); the
    # moves put experts back and the objective falls more than a hundredfold. (Truths found
    # by trying seeds: from most planted starts the solver alone gets back.)
    H, N, K, D = shape
    G = random_measure(*shape, scale=2.0, random_state=truth_seed)
    X, y = make_hmoe_regression(600, measure=G, n_experts=K, n_features=D, gate=gate,
                                activation="tanh", noise=0.0, random_state=6)
    problem = make_problem(X, y, shape, gate, "tanh")
    lower, upper = problem.lower, problem.upper
    a = G.a.copy()
    a[0, [0, 1]] = a[0, [1, 0]]
    planted = pack(MixingMeasure(G.omega, G.M, a))

    def search(moves):
        # the planted start run to convergence (the incumbent), then the moves of it
        return Search(local=LevenbergMarquardt(max_iter=300, tol=1e-12), n_starts=1,
                      n_candidates=1, race_iter=6, rounds=1, moves=moves, signed=True).run(
            problem, _no_draw, [planted])

    inc = search([]).results[0]
    assert inc.converged and inc.objective > 1e-7 * np.mean(y**2)
    found = search([ExpertReassignment()])
    best = found.results[0]
    assert found.move_rounds["local"] >= 1 and found.n_passes > inc.n_passes
    assert best.objective < inc.objective / 100
    assert np.all(best.theta >= lower) and np.all(best.theta <= upper)


def test_reassign_schedule():
    local_moves = [HeadRestarts, ExpertReassignment, SoftModes]
    for gate, heads in [("value", 2), ("sdpa", 3)]:
        assert [type(m) for m in schedule_of(gate, heads, "tanh").moves] == local_moves
    assert schedule_of("value", 1, "tanh").moves == []
    for gate, act in [("value", "sigmoid"), ("sdpa", "gelu"), ("none", "tanh"),
                      ("output", "tanh"), ("value", "silu")]:
        assert [type(m) for m in schedule_of(gate, 2, act).moves] == [HeadRestarts]
    assert schedule_of("value", 2, "tanh", local="lbfgs").moves == []
    with pytest.raises(ValueError, match="gate"):
        schedule_of("values", 2, "tanh")


@pytest.mark.parametrize("value", ["yes", 1, None, 0.0, ExpertReassignment()])
def test_moves_are_validated(value):
    X, y = make_hmoe_regression(50, random_state=0)
    with pytest.raises(ValueError, match="moves must be 'auto' or a list of Move objects"):
        HMoERegressor(solver=Search(moves=value)).fit(X, y)


@pytest.mark.parametrize("move,match", [
    (ExpertReassignment(all_permutations_up_to=0), "all_permutations_up_to must be an integer"),
    (SoftModes(n_modes=0), "n_modes must be an integer >= 1"),
    (SoftModes(steps=[1.0, -2.0]), "steps must be a non-empty sequence"),
    (SoftModes(steps=2.0), "steps must be a non-empty sequence"),
])
def test_move_knobs_are_validated(move, match):
    X, y = make_hmoe_regression(50, random_state=0)
    with pytest.raises(ValueError, match=match):
        HMoERegressor(solver=Search(moves=[move])).fit(X, y)


def test_estimator_runs_the_moves_as_asked_and_reproducibly():
    X, y = make_hmoe_regression(300, n_heads=2, n_tokens=2, n_experts=1, n_features=2,
                                gate="value", activation="tanh", random_state=0)
    kw = dict(n_heads=2, n_tokens=2, n_experts=1, gate="value", activation="tanh", n_starts=2,
              random_state=0)

    def search(moves, **knobs):
        return Search(n_candidates=4, moves=moves, **knobs)

    local = [ExpertReassignment(), SoftModes()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = HMoERegressor(solver=search([HeadRestarts(per_head=2)], rounds=1), **kw).fit(X, y)
        on = HMoERegressor(solver=search([HeadRestarts(per_head=2), *local], rounds=1),
                           **kw).fit(X, y)
        again = HMoERegressor(solver=search([HeadRestarts(per_head=2), *local], rounds=1),
                              **kw).fit(X, y)
        one_kw = dict(n_tokens=2, n_experts=1, gate="value", activation="tanh", n_starts=2,
                      random_state=0)
        one_head = HMoERegressor(solver=search(local), **one_kw).fit(X, y)
        one_head_off = HMoERegressor(solver=search([]), **one_kw).fit(X, y)
    assert off.reassign_rounds_ == 0
    assert on.objective_ <= off.objective_
    assert on.n_kernel_passes_ > off.n_kernel_passes_  # the moves were raced
    np.testing.assert_array_equal(on.theta_, again.theta_)
    assert on.reassign_rounds_ == again.reassign_rounds_
    # the local moves run where "auto" would not (one head)
    assert one_head.schedule_["moves"] == ["ExpertReassignment", "SoftModes"]
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
    # a box wide enough (and signed weights) that no step is clipped
    problem = make_problem(X, y, shape, gate, "tanh", omega_max=1e3, param_bound=1e3,
                           positive_weights=False, fit_intercept=intercept)
    cands = SoftModes().propose(problem, full, _no_draw)
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
    problem = make_problem(X, y, shape, "value", "tanh")
    lower, upper = problem.lower, problem.upper
    start = pack(random_measure(*shape, scale=2.0, random_state=9))

    def search(moves):
        return Search(local=LevenbergMarquardt(max_iter=200, tol=1e-10), n_starts=1,
                      n_candidates=1, race_iter=6, rounds=1, moves=moves, signed=False).run(
            problem, _no_draw, [start])

    inc = search([]).results[0]
    found = search([SoftModes()])
    best = found.results[0]
    # here the moves do move (so the box is checked on a moved point), and only downhill
    assert found.n_passes > inc.n_passes and found.move_rounds["local"] >= 1
    assert best.objective < inc.objective
    assert np.all(best.theta >= lower) and np.all(best.theta <= upper)
    assert np.all(np.isfinite(best.theta))


def test_soft_mode_candidates_are_clipped_to_the_box():
    shape = (1, 2, 1, 2)
    G = random_measure(*shape, scale=1.5, random_state=3)
    X, y = make_hmoe_regression(200, measure=G, n_experts=1, n_features=2, gate="value",
                                activation="tanh", noise=0.1, random_state=4)
    problem = make_problem(X, y, shape, "value", "tanh", param_bound=1.0)
    theta = np.clip(pack(G), problem.lower, problem.upper)
    cands = SoftModes(n_modes=3, steps=[8.0]).propose(problem, theta, _no_draw)
    assert len(cands) == 3 * 2
    for t in cands:
        assert np.all(t >= problem.lower) and np.all(t <= problem.upper)
    assert any(np.any(t == problem.upper) | np.any(t == problem.lower) for t in cands)
