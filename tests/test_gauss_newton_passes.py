"""The Levenberg–Marquardt solver's kernel calls, set up once per batch of starts: the same bits
as the kernels' wrappers, and a batch of starts gives what one start at a time gives."""

import numba
import numpy as np
import pytest

from hmoe_estim import make_hmoe_regression
from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
from hmoe_estim.kernels import KernelPasses, single_thread_blas
from hmoe_estim.kernels.jacobian import gauss_newton_sums
from hmoe_estim.kernels.objective import SERIAL_SAMPLES, predict
from hmoe_estim.model import make_bounds, n_params
from hmoe_estim.model._starts import random_start_theta
from hmoe_estim.solvers._lm import levenberg_marquardt, run_lm_starts

from .problems import make_problem


@pytest.mark.parametrize("gate", ["none", "value", "sdpa", "output"])
@pytest.mark.parametrize("n", [300, SERIAL_SAMPLES + 300])  # serial and parallel kernels
def test_passes_give_the_bits_of_the_kernel_wrappers(gate, n):
    shape = (2, 2, 2, 3)
    rng = np.random.default_rng(3)
    XT = np.ascontiguousarray(rng.uniform(-1, 1, size=(3, n)))
    y = rng.normal(size=n)
    g, a = GATE_CODES[gate], ACTIVATION_CODES["gelu"]
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        passes = KernelPasses(XT, y, shape, g, a)
        other = 0.5 * rng.normal(size=n_params(*shape))
        for k in range(3):
            theta = 0.5 * rng.normal(size=n_params(*shape))
            f = passes.values(theta).copy()
            np.testing.assert_array_equal(f, predict(theta, XT, *shape, g, a))
            # the sums of the same theta object (its mixed values kept), then of another one
            for t in (theta, other):
                got = passes.sums(t, 0.1 * k)
                want = gauss_newton_sums(t, XT, y, *shape, g, a, offset=0.1 * k)
                assert len(got) == 6 and got[5] is True  # all finite
                for u, v in zip(got[:5], want):
                    np.testing.assert_array_equal(u, v)
        bad = other.copy()
        bad[0] = np.nan
        assert passes.sums(bad, 0.0)[5] is False
    finally:
        numba.set_num_threads(old)


def test_passes_flag_infinite_sums():
    shape = (1, 2, 1, 2)
    XT = np.full((2, 10), 1e200)
    passes = KernelPasses(XT, np.zeros(10), shape, GATE_CODES["none"], 0)
    JtJ, Jtr, ssr, _, _, finite = passes.sums(np.ones(n_params(*shape)), 0.0)
    assert not finite
    assert not (np.isfinite(ssr) and np.isfinite(JtJ).all() and np.isfinite(Jtr).all())


@pytest.mark.parametrize("gate,options", [
    ("none", {}),
    ("value", {"fit_intercept": True}),
    ("sdpa", {"alpha": 1e-3}),
    ("output", {"fit_intercept": True, "alpha": 1e-3}),
])
def test_a_batch_of_starts_gives_the_results_of_single_starts(gate, options):
    shape = (1, 2, 2, 2)
    X, y = make_hmoe_regression(500, n_features=2, gate=gate, noise=0.05, random_state=2)
    XT = np.require(X.T, requirements=["C", "W"])
    lower, upper = make_bounds(shape, omega_max=10.0, param_bound=10.0)
    rng = np.random.RandomState(0)
    starts = [random_start_theta(shape, rng) for _ in range(5)]
    mu0s = [1e-3, 1e-1, 1.0, 1e-3, 10.0]
    counts = [(0, 0, 0), (1, 2, 3), (0, 0, 5), (2, 1, 1), (0, 0, 0)]
    fit_intercept = options.get("fit_intercept", False)
    if fit_intercept:
        starts = [np.append(s, 0.3) for s in starts]
    problem = make_problem(X, y, shape, gate, "tanh", **options)
    batch = run_lm_starts(starts, problem, max_iter=6, mu0s=mu0s, counts=counts, **options)
    for t, r, mu0, (nj, nf, ni) in zip(starts, batch, mu0s, counts):
        kw = dict(max_iter=6, mu0=mu0, n_jac=nj, n_fev=nf, n_iter=ni,
                  alpha=options.get("alpha", 0.0))
        if fit_intercept:
            one = levenberg_marquardt(t[:-1], XT, y, shape, gate, "tanh", lower, upper,
                                      fit_offset=True, offset=t[-1], **kw)
            theta = np.append(one.theta, one.offset)
        else:
            one = levenberg_marquardt(t, XT, y, shape, gate, "tanh", lower, upper, **kw)
            theta = one.theta
        assert r.theta.tobytes() == theta.tobytes()
        assert (r.objective, r.n_iter, r.n_jac, r.n_fev, r.damping, r.offset, r.message) == (
            one.objective, one.n_iter, one.n_jac, one.n_fev, one.damping, one.offset,
            one.message)


def test_single_thread_blas_limits_and_restores():
    from threadpoolctl import threadpool_info

    def blas_threads():
        return {i["filepath"]: i["num_threads"] for i in threadpool_info()
                if i["user_api"] == "blas"}

    before = blas_threads()
    with single_thread_blas():
        with single_thread_blas():  # nested: free, and the limit stays
            inner = blas_threads()
        outer = blas_threads()
    assert set(inner.values()) <= {1} and set(outer.values()) <= {1}
    assert blas_threads() == before
