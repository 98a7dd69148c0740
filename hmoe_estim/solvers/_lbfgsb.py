"""Multi-start L-BFGS-B on the least-squares objective (paper eq. (3)).

Each start runs ``scipy.optimize.minimize(method="L-BFGS-B", jac=True, bounds=...)`` on the
fused Numba objective+gradient. Starts run in parallel through joblib when ``n_jobs`` asks; the
kernels give bit-identical results for any number of threads, so the fit does not depend on
``n_jobs``.
"""

import numpy as np
from joblib import Parallel, delayed
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from .._names import ACTIVATION_CODES, GATE_CODES
from ..kernels import numba_threads, objective_and_gradient
from ._result import SolveResult, message

__all__ = ["StartResult", "run_starts"]

#: The result type of release 0.1.0's ``hmoe_estim.optim``, now :class:`SolveResult`.
StartResult = SolveResult

#: Below this many samples (two blocks) the kernels run on one thread: there is little to
#: split, and waking a second thread costs more than it saves. The threshold depends on the
#: short libgomp spin set at import (``hmoe_estim/__init__.py``); the timings behind it are on
#: the documentation's performance page ("Threads below a few hundred samples").
SERIAL_BELOW = 512


def _run_one(
    theta0, XT, y, shape, gate, activation, lower, upper, max_iter, tol, n_threads,
    options=(False, 0.0),
):
    if XT.shape[1] < SERIAL_BELOW:
        n_threads = 1
    with numba_threads(n_threads):
        return _lbfgsb(theta0, XT, y, shape, gate, activation, lower, upper, max_iter, tol, options)


def _lbfgsb(theta0, XT, y, shape, gate, activation, lower, upper, max_iter, tol,
            options=(False, 0.0)):
    H, N, K, D = shape
    g, act = GATE_CODES[gate], ACTIVATION_CODES[activation]

    def fun(theta):
        return objective_and_gradient(theta, XT, y, H, N, K, D, g, act, *options)

    # L-BFGS-B's own linear algebra is tiny; a multi-threaded BLAS only spins threads that
    # steal the cores of the Numba kernel.
    with threadpool_limits(limits=1, user_api="blas"):
        res = minimize(
            fun,
            theta0,
            jac=True,
            method="L-BFGS-B",
            bounds=list(zip(lower, upper)),
            options={
                "maxiter": max_iter, "ftol": tol, "gtol": tol, "maxfun": max(15000, 3 * max_iter)
            },
        )
    value = float(res.fun)
    if not np.isfinite(value):
        value = np.inf
    # SciPy's status: 0 converged, 1 an iteration or evaluation limit, 2 stopped abnormally
    status = 6 if res.success else (0 if res.status == 1 else -5)
    if value == np.inf and int(res.nit) == 0:  # the start itself overflows
        status = -1
    detail = str(res.message)
    return SolveResult(
        theta=np.asarray(res.x, dtype=np.float64),
        objective=value,
        n_iter=int(res.nit),
        status=status,
        message=message(status, detail=detail, max_iter=max_iter, unit="iterations"),
        n_passes=int(res.nfev),
    )


def run_starts(
    starts, XT, y, shape, gate, activation, bounds, *, max_iter, tol, n_jobs=None, verbose=0,
    fit_intercept=False, alpha=0.0,
):
    """Run L-BFGS-B from every start; return the list of :class:`SolveResult` in start order.

    Parameters
    ----------
    starts : list of ndarray
        Packed starting points (``hmoe_estim/model/_parameters.py`` layout).
    XT : ndarray (D, n)
        Transposed inputs, C-contiguous.
    y : ndarray (n,)
    shape : tuple (H, N, K, D)
    gate, activation : str
    bounds : (lower, upper)
    max_iter : int
    tol : float
        ``ftol`` and ``gtol`` of L-BFGS-B.
    n_jobs : int or None
        Parallel starts (joblib). Each worker's Numba thread count is set so that
        ``workers × threads`` does not exceed the machine's cores.
    verbose : int
    fit_intercept : bool, default=False
        The starts end with an intercept (see
        ``kernels.objective.objective_and_gradient``).
    alpha : float, default=0.0
        Ridge penalty on ``M`` and ``a``.
    """
    from joblib import effective_n_jobs

    lower, upper = bounds
    options = (bool(fit_intercept), float(alpha))
    jobs = min(effective_n_jobs(n_jobs), len(starts))
    if jobs <= 1:
        return [
            _run_one(t, XT, y, shape, gate, activation, lower, upper, max_iter, tol, None, options)
            for t in starts
        ]
    import os

    threads = max(1, (os.cpu_count() or 1) // jobs)
    return Parallel(n_jobs=jobs, verbose=max(0, verbose - 1))(
        delayed(_run_one)(
            t, XT, y, shape, gate, activation, lower, upper, max_iter, tol, threads, options
        )
        for t in starts
    )
