"""Determinism: the same ``random_state`` gives the same bits for any ``n_jobs``, any Numba
thread count, any interleaving of the kernels' workers and any BLAS thread count.

The fits compare ``theta_``, ``objective_``, ``n_kernel_passes_``, ``start_n_iter_`` and
``start_objectives_`` bit for bit. The serial thresholds are lowered so that a small fit runs the
parallel kernels in this process with two Numba threads, while ``n_jobs=2`` runs the serial
ones in joblib's worker processes (one thread each): every variant meets every other.
"""

import warnings

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from hmoe_estim import HMoERegressor, make_hmoe_regression
from hmoe_estim.kernels import jacobian, objective
from hmoe_estim.kernels.objective import _chunks, _objective_worker, chunk_total
from hmoe_estim.model import random_start_theta
from hmoe_estim.solvers import Search, SoftModes, _lbfgsb, _lm

from .problems import make_problem

N_SAMPLES = 700  # above the lowered thresholds below: the parallel kernels run (3 blocks)
TWO = min(2, numba.config.NUMBA_NUM_THREADS)


@pytest.fixture
def parallel_small(monkeypatch):
    """Thresholds lowered so that ``N_SAMPLES`` runs the multi-threaded kernel variants."""
    monkeypatch.setattr(objective, "SERIAL_SAMPLES", 256)
    monkeypatch.setattr(_lbfgsb, "SERIAL_BELOW", 256)
    monkeypatch.setattr(_lm, "LM_SERIAL_BELOW", 256)
    old = numba.get_num_threads()
    yield
    numba.set_num_threads(old)


def _fingerprint(est):
    return (est.theta_.tobytes(), float(est.objective_).hex(), int(est.n_kernel_passes_),
            tuple(est.start_n_iter_.tolist()), est.start_objectives_.tobytes())


@pytest.mark.parametrize("solver, kw", [
    (Search(n_starts=2, n_candidates=8), dict(max_iter=40)),
    ("lbfgs", dict(n_starts=2, max_iter=60)),
])
def test_fit_bits_do_not_depend_on_n_jobs_or_numba_threads(parallel_small, solver, kw):
    X, y = make_hmoe_regression(N_SAMPLES, n_experts=2, gate="value", random_state=3)
    prints = {}
    for n_jobs, threads in [(1, 1), (1, TWO), (2, 1), (2, TWO), (1, TWO)]:
        numba.set_num_threads(threads)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = HMoERegressor(gate="value", n_experts=2, solver=solver, n_jobs=n_jobs,
                                random_state=0, **kw).fit(X, y)
        prints.setdefault(_fingerprint(est), []).append((n_jobs, threads))
    assert len(prints) == 1, f"configurations giving different fits: {list(prints.values())}"


def _shuffled_workers(run, nworkers, rng):
    """Run workers ``0 .. nworkers-1`` one at a time in a random order: any schedule a loaded
    machine can produce (each worker owns its chunks; only the order of execution varies)."""
    for wk in rng.permutation(nworkers):
        run(int(wk), nworkers)


@pytest.mark.parametrize("gate, act", [(0, 0), (1, 0), (2, 0), (3, 1)])
def test_kernel_sums_do_not_depend_on_worker_count_or_schedule(gate, act):
    rng = np.random.default_rng(gate)
    H, N, K, D = 1, 3, 2, 2
    n = 64 * 256 + 77  # more blocks than chunks, a partial last block
    XT = np.ascontiguousarray(rng.uniform(-1, 1, size=(D, n)))
    y = rng.normal(size=n)
    theta = random_start_theta((H, N, K, D), rng)
    bv = objective.mixed_values(theta, H, N, K, D, gate)
    width = theta.size + 2 + bv.shape[0]
    nchunks = _chunks(n)[1]
    entry = jacobian._entry(False, gate, act)
    P = theta.size
    gn_width = P * (P + 1) // 2 + 2 * P + 2
    gn_chunks = jacobian._jchunks(n, gn_width)[1]
    results = set()
    for nworkers in (1, 2, 3, 5, 64):
        part = np.zeros((nchunks, width))
        _shuffled_workers(lambda wk, nw: _objective_worker(
            wk, nw, theta, XT, y, bv, H, N, K, gate, act, 0.25, part), nworkers, rng)
        gn = np.full((gn_chunks, gn_width), np.nan)  # the pass zeroes each chunk's row itself
        out = np.empty(0)
        _shuffled_workers(lambda wk, nw: entry(
            wk, nw, theta, XT, y, 0.25, bv, H, N, K, gate, act, gn, out, True), nworkers, rng)
        assert np.isfinite(gn).all()
        results.add((chunk_total(part).tobytes(), chunk_total(gn).tobytes()))
    assert len(results) == 1


def test_chunk_total_adds_the_chunks_in_order_bit_for_bit():
    """The compiled ``chunk_total`` makes NumPy's row-by-row additions, signed zeros and
    non-finite values included."""
    rng = np.random.default_rng(5)
    for chunks, width in [(1, 7), (2, 1), (40, 2210), (64, 333)]:
        part = rng.standard_normal((chunks, width)) * 10.0 ** rng.integers(-8, 16, (chunks, width))
        part[:, :2] = -0.0
        part[rng.integers(chunks), -1] = np.inf
        part[rng.integers(chunks), width // 2] = np.nan
        want = part[0].copy()
        for c in range(1, chunks):
            want += part[c]
        assert chunk_total(part).tobytes() == want.tobytes()


def test_soft_mode_steps_do_not_depend_on_blas_threads():
    # P = 294: LAPACK's eigenvectors differ in their last bits between 1 and 2 BLAS threads
    rng = np.random.default_rng(0)
    shape = (2, 3, 3, 8)
    X = rng.uniform(-1, 1, size=(1500, 8))
    y = rng.normal(size=1500)
    problem = make_problem(X, y, shape, "value", "tanh").signed()
    theta = random_start_theta(shape, rng, positive_weights=False)
    steps = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            steps.append(b"".join(t.tobytes()
                                  for t in SoftModes().propose(problem, theta, None)))
    assert steps[0] == steps[1]


def test_fit_bits_do_not_depend_on_the_layout_of_the_data():
    # Fortran order, read-only and strided views of X and y give the same bits, and so do
    # n_jobs=2 workers whose data joblib hands over as read-only memory maps (arrays above
    # 1 MB): a kernel specialised for another array layout could sum in another order
    X, y = make_hmoe_regression(50_000, n_features=3, n_experts=1, gate="value", noise=0.1,
                                random_state=6)
    kw = dict(gate="value", n_experts=1, max_iter=4, random_state=0,
              solver=Search(n_starts=2, n_candidates=2, rounds=1, moves=[]))
    ro_X, ro_y = X.copy(), y.copy()
    ro_X.setflags(write=False)
    ro_y.setflags(write=False)
    wide_X, wide_y = np.repeat(X, 2, axis=1), np.repeat(y, 2)
    prints = set()
    for data, n_jobs in [((X, y), 1), ((X, y), 2), ((np.asfortranarray(X), y), 1),
                         ((ro_X, ro_y), 1), ((wide_X[:, ::2], wide_y[::2]), 1)]:
        assert np.array_equal(data[0], X) and np.array_equal(data[1], y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = HMoERegressor(n_jobs=n_jobs, **kw).fit(*data)
        prints.add(_fingerprint(est))
    assert len(prints) == 1
