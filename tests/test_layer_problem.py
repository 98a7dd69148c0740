"""``LayerProblem``: the layer fit in the form the solvers take. Its passes drive the package's
Levenberg–Marquardt iterations (``solvers._lm._levenberg_marquardt`` takes a passes object),
which recover a small layer to its gauge from noiseless data; subsamples, head blocks and the
objective's gradient are consistent."""

import numpy as np
import pytest

from hmoe_estim.kernels import single_thread_blas
from hmoe_estim.layer import LayerProblem, make_attention_regression, random_attention_layer
from hmoe_estim.solvers._lm import _levenberg_marquardt


def _problem(gate="none", n=100, rows="all", seed=0, **form):
    truth = random_attention_layer(1, 2, 2, scale=1.5, random_state=seed, **form)
    X, Y = make_attention_regression(n, truth, n_tokens=3, gate=gate, rows=rows,
                                     random_state=seed + 1)
    lower, upper = LayerProblem.default_box(truth.layout)
    return truth, LayerProblem(X, Y, truth.layout, gate, "sigmoid", lower, upper, rows=rows)


@pytest.mark.parametrize("gate", ["none", "value", "key"])
def test_lm_on_layer_passes_recovers_the_layer_to_its_gauge(gate):
    truth, problem = _problem(gate)
    rng = np.random.RandomState(3)
    with single_thread_blas():
        for _ in range(8):  # random starts until one reaches the rounding level
            res = _levenberg_marquardt(problem.passes(), problem.random_start(rng, 1.5),
                                       problem.y, problem.lower, problem.upper, max_iter=300)
            if res.objective < 1e-20:
                break
    assert res.objective < 1e-20, res.message
    fit = problem.layout.unpack(res.theta)
    assert np.linalg.norm(fit.P_ - truth.P_) < 1e-7
    assert np.linalg.norm(fit.VO_ - truth.VO_) < 1e-7


def test_problem_protocol():
    truth, problem = _problem("sdpa", n=40, rows="last", fit_intercept=True)
    assert problem.n_samples == 40 and problem.n_residuals == 40 * 2
    assert problem.fit_intercept is False and problem.sign_symmetric is False
    assert problem.signed() is problem and problem.shape == (1, 3, 2, 2)
    sub = problem.subsample(10, part=1)
    assert sub.n_samples == 10 and sub.y.size == 20
    assert problem.subsample(100) is problem
    blocks = problem.head_blocks()
    assert len(blocks) == 1 and blocks[0].size == problem.n_params - 2  # all but the intercept
    theta = problem.layout.pack(truth)
    theta = theta + 0.1 * np.random.default_rng(0).normal(size=theta.size)
    v, g = problem.objective_and_gradient(theta)
    step = 1e-6
    fd = [(problem.objective_and_gradient(theta + step * e)[0]
           - problem.objective_and_gradient(theta - step * e)[0]) / (2 * step)
          for e in np.eye(theta.size)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    A = problem.gauss_newton_matrix(theta)
    A2, *_ = problem.passes().sums(theta, 0.0)
    np.testing.assert_array_equal(A, A2)


def test_problem_refuses_bad_input():
    truth, problem = _problem()
    lower, upper = LayerProblem.default_box(truth.layout)
    with pytest.raises(ValueError, match=r"Y must have shape \(100, 3, 2\)"):
        LayerProblem(problem.X, problem.y, truth.layout, "none", "sigmoid", lower, upper)
    with pytest.raises(ValueError, match="alpha must be a finite number >= 0"):
        LayerProblem(problem.X, problem.y.reshape(100, 3, 2), truth.layout, "none", "sigmoid",
                     lower, upper, alpha=-0.1)
    with pytest.raises(ValueError, match="the box has"):
        LayerProblem(problem.X, problem.y.reshape(100, 3, 2), truth.layout, "none", "sigmoid",
                     lower[:-1], upper)


def test_search_fits_a_layer_problem():
    # the package's search (race, rounds) on a layer: every knob given (the "auto" table is
    # the per-entry models'), no moves, no signed weights
    from hmoe_estim.solvers import LevenbergMarquardt, Search

    truth, problem = _problem("sdpa", n=150, gate_form="multiplicative")
    rng = np.random.RandomState(4)
    search = Search(local=LevenbergMarquardt(max_iter=300), n_starts=2, n_candidates=8,
                    race_iter=10, race_samples=64, rounds=2, agree=2, moves=[], signed=False)
    out = search.run(problem, lambda: problem.random_start(rng, 1.5))
    best = out.results[out.best]
    assert best.objective < 1e-20, best.message
    fit = problem.layout.unpack(best.theta)
    assert np.linalg.norm(fit.P_ - truth.P_) < 1e-7
    assert np.linalg.norm(fit.VO_ - truth.VO_) < 1e-7


@pytest.mark.parametrize("n, threads", [(300, 1), (400, 2)])
def test_lm_threads_count_a_layers_residuals(n, threads):
    """The LM runs a layer's kernels on Numba's threads from ``serial_below`` residuals on
    (the layer kernel's own ``SERIAL_SAMPLES``; a token matrix holds ``N·d_out`` = 6 of
    them), far below the ``LM_SERIAL_BELOW`` samples of an HMoE entry."""
    import numba

    from hmoe_estim.kernels import SERIAL_SAMPLES, numba_threads
    from hmoe_estim.solvers._lm import LM_SERIAL_BELOW, run_lm_starts

    truth, problem = _problem("value", n=n)
    assert problem.serial_below == SERIAL_SAMPLES < LM_SERIAL_BELOW
    assert (problem.n_residuals >= SERIAL_SAMPLES) == (threads == 2)
    seen = []
    make = problem.passes

    def passes():
        p = make()
        sums = p.sums

        def counted(theta, offset):
            seen.append(numba.get_num_threads())
            return sums(theta, offset)

        p.sums = counted
        return p

    problem.passes = passes
    with numba_threads(2):
        run_lm_starts([problem.random_start(np.random.RandomState(0))], problem, max_iter=1)
    assert seen and set(seen) == {threads}
