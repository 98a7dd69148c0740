"""Bounded Levenberg–Marquardt on the least-squares objective of eq. (3).

The objective ``Σ_j r_j²``, ``r_j = f_theta(x_j) + offset − y_j``, is a sum of squares in few
parameters (``P`` ≈ 10–300) over many samples: each iteration calls the fused kernel
:func:`hmoe_estim.kernels.jacobian.gauss_newton_sums` once for ``A = JᵀJ`` and ``g = Jᵀr``
(never the n × P Jacobian) and solves the damped Gauss–Newton system

    (A_FF + μ · diag(d_F)) s_F = −g_F,       d = max(diag(A), 1e-12 · max diag(A))

on the *free* parameters ``F``: those not held at a bound of the box (A.1) by the gradient
(a parameter at its lower bound with ``g_p > 0``, or at its upper bound with ``g_p < 0``,
is fixed for the iteration). The trial point is projected on the box, its sum of squares
evaluated (a forward pass of the prediction kernel), and the step
accepted when the actual decrease is a fraction ``> 1e-4`` of the decrease predicted by the
Gauss–Newton model ``½‖r + J s‖²``. The damping follows Nielsen's rule: on acceptance
``μ ← μ · max(1/3, 1 − (2ρ − 1)³)``, on rejection ``μ ← μ · ν``, ``ν ← 2ν``. A failed
Cholesky factorisation (``A`` singular or indefinite in rounding), a trial point whose sum of
squares is not finite, or a step that the projection makes worse are rejected the same way.

Stopping rules, free of the data's scale, with ``σ̂² = Σ r² / n`` the residual variance: the
Gauss–Newton decrement ``δ = g_Fᵀ (A_FF + ε diag(d_F))⁻¹ g_F`` (ε = 1e-10) is the decrease
of ``Σ r²`` a full Gauss–Newton step promises; the start has converged when
``δ <= max(tol · Σ r², stat_tol · σ̂²)`` — the objective ``Σ r² / n`` would drop by less than
``stat_tol · σ̂²/n`` (default 1% of ``σ²/n``) —, when the last ``STALL_WINDOW`` = 10
iterations lowered ``Σ r²`` by less than ``10 · stat_tol · σ̂²`` in all (creeping along a flat
valley, as over-specified fits do), or when the damping has grown past ``1e16`` with ``δ``
below ``1e-6 · Σ r²`` (no decrease is measurable in floating point), or when ``Σ r²`` is at
the rounding level of the targets, ``n · (1e-13 · rms(y))²`` (noise-free data). A start
never returns non-finite parameters: a start whose first objective is not finite ends at
once, with ``objective = inf`` and the reason in ``message``.

The estimator's options. An intercept ``c`` (``fit_offset``) is one more parameter with a
column of ones in ``J``: ``[J 1]ᵀ[J 1] = [[JᵀJ, ΣJ], [ΣJᵀ, n]]``, ``[J 1]ᵀr = [Jᵀr, Σr]``
(the kernel returns the column sums ``ΣJ`` and ``Σr``); it is unbounded. The ridge penalty
``alpha·(‖M‖²_F + ‖a‖²)`` of ``kernels.objective.objective_and_gradient``
(free gate matrices ``M[h, i]``, ``i < N−1``, an off-diagonal entry of the stored triangle
counting twice; the experts ``a``; not ``omega``, not ``c``) is added to the *mean* squared
residual there, so here, on sums, the minimised function is

    S(theta) = Σ r² + n·alpha·Σ_p w_p theta_p²,       w_p ∈ {0, 1, 2},

``S / n`` being exactly the objective L-BFGS-B minimises. The penalty is a sum of squares of
the residuals ``√(n·alpha·w_p) theta_p``, so it enters the Gauss–Newton model exactly:
``A ← A + n·alpha·diag(w)``, ``g ← g + n·alpha·w ⊙ theta``. Everything above (decrement, stall
rule, ``σ̂² = S / n``) then reads ``S`` for ``Σ r²``.

Cost. The race runs most iterations on 1024–4096 samples, where a kernel call takes tens of
microseconds and the Python around it as much: the starts of a batch share one set-up of the
kernel calls (:class:`~hmoe_estim.kernels.KernelPasses`: entry point, buffers, thread count,
set once), the BLAS thread limit is set once per batch, and an iteration makes only the NumPy
calls the step needs. Results are the same bits as with the kernels' wrappers
(``tests/test_gauss_newton_passes.py``).
"""

import math
from contextlib import nullcontext

import numpy as np

from .._names import ACTIVATION_CODES, GATE_CODES
from ..kernels import (
    KernelPasses,
    collector_paused,
    damped_step,
    free_set,
    numba_threads,
    penalty_weights,
    single_thread_blas,
)
from ._result import SolveResult, message

__all__ = ["levenberg_marquardt", "run_lm_starts", "STAT_TOL"]

_MU0 = 1e-3
_MU_MAX = 1e16
_EPS_DECREMENT = 1e-10
_ACCEPT = 1e-4
#: Default ``stat_tol``: a decrease of the objective below 1% of ``σ²/n`` is statistically
#: irrelevant (the objective itself fluctuates by ``σ² √(2/n)`` between data sets); no looser,
#: because over-specified fits creep along flat valleys whose parameters the Voronoi loss reads.
STAT_TOL = 1e-2
#: Below this many samples the LM kernels run on one thread: an iteration makes two short
#: kernel calls, and a second thread saves less than each call waits for it to wake. A
#: problem with a ``serial_below`` (a layer's, in residuals) sets its own.
LM_SERIAL_BELOW = 8192
#: Iterations over which the stall rule looks back.
STALL_WINDOW = 10


def levenberg_marquardt(theta0, XT, y, shape, gate, activation, lower, upper, *, max_iter=200,
                        tol=1e-9, stat_tol=STAT_TOL, mu0=_MU0, offset=0.0, fit_offset=False,
                        alpha=0.0, n_jac=0, n_fev=0, n_iter=0):
    """Bounded Levenberg–Marquardt from ``theta0`` (see the module docstring).

    Parameters
    ----------
    theta0 : ndarray of shape (P,)
        Start, in the layout of ``hmoe_estim/model/_parameters.py``; projected on the box.
    XT : ndarray of shape (D, n), C-contiguous
    y : ndarray of shape (n,), float64
    shape : tuple (H, N, K, D)
    gate, activation : str
    lower, upper : ndarray of shape (P,)
        The box of (A.1).
    max_iter : int
        Cap on the iterations (Jacobian passes) of this call.
    tol : float
        Relative decrease of the objective below which the start has converged.
    stat_tol : float
        Decrease below which the start has converged, in units of ``Σ r² / n`` (the
        residual variance ``σ²``) of ``Σ r²``, i.e. of ``σ²/n`` of the objective; also the
        stall rule (see the module docstring).
    mu0 : float
        Initial relative damping (resume a start with the ``damping`` of its result).
    offset : float
        Intercept added to ``f``; fitted too when ``fit_offset`` (unbounded).
    alpha : float
        Ridge penalty ``alpha·(‖M‖²_F + ‖a‖²)`` added to the mean squared residual (see the
        module docstring); ``0`` leaves the iterations bit-identical to a fit without it.
    n_jac, n_fev, n_iter : int
        Counts carried over when a start is resumed.

    Returns
    -------
    SolveResult
        ``objective`` is the mean squared residual ``Σ r² / n``, plus the penalty when
        ``alpha > 0`` — the value of ``objective_and_gradient`` at the result.
    """
    passes = KernelPasses(XT, y, shape, GATE_CODES[gate], ACTIVATION_CODES[activation])
    return _levenberg_marquardt(
        passes, theta0, y, lower, upper, max_iter=max_iter, tol=tol, stat_tol=stat_tol,
        mu0=mu0, offset=offset, fit_offset=fit_offset, alpha=alpha, n_jac=n_jac, n_fev=n_fev,
        n_iter=n_iter)


def _levenberg_marquardt(passes, theta0, y, lower, upper, *, max_iter=200, tol=1e-9,
                         stat_tol=STAT_TOL, mu0=_MU0, offset=0.0, fit_offset=False, alpha=0.0,
                         n_jac=0, n_fev=0, n_iter=0):
    """:func:`levenberg_marquardt` on the data of ``passes`` (a
    :class:`~hmoe_estim.kernels.KernelPasses`)."""
    n = passes.n
    if fit_offset:
        lower = np.append(lower, -np.inf)
        upper = np.append(upper, np.inf)
        theta = np.append(np.asarray(theta0, float), float(offset)).clip(lower, upper)
    else:  # ndarray.clip: np.clip without its dispatch layer
        theta = np.asarray(theta0, dtype=np.float64).clip(lower, upper)
    P = theta.size
    nm = n if n > 0 else 1
    floor = passes.floor  # rounding level of Σ r²

    # the ridge penalty on sums: S = Σ r² + Σ_p pen_p theta_p², pen = n·alpha·w
    penalised = float(alpha) > 0.0
    if penalised:
        if passes.penalty_weights is None:  # the HMoE layout's (a problem's passes set it)
            passes.penalty_weights = penalty_weights(passes.shape)
        pen = float(alpha) * nm * passes.penalty_weights
        if fit_offset:
            pen = np.append(pen, 0.0)
    recheck = fit_offset or penalised  # A and g are more than the kernel's sums

    def split(t):
        return (t[:-1], t[-1]) if fit_offset else (t, offset)

    def sums(t):
        th, off = split(t)
        A, g, ssr, colsum, rsum, finite = passes.sums(th, off)
        if fit_offset:  # append the intercept's column of ones to J
            A2 = np.empty((P, P))
            A2[:-1, :-1] = A
            A2[:-1, -1] = colsum
            A2[-1, :-1] = colsum
            A2[-1, -1] = n
            A, g = A2, np.append(g, rsum)
        if penalised:  # residuals √pen_p theta_p: exact in the Gauss–Newton model
            A = A + np.diag(pen)
            g = g + pen * t
            ssr = ssr + float(pen.dot(t * t))
        if recheck:
            finite = bool(np.isfinite(ssr) and np.isfinite(A).all() and np.isfinite(g).all())
        return A, g, ssr, finite

    def result(t, ssr, it, status, mu, **fields):
        th, off = split(t)
        return SolveResult(
            theta=th.copy(), objective=float(ssr / nm) if math.isfinite(ssr) else np.inf,
            n_iter=it, status=status, message=message(status, **fields),
            n_passes=n_jac + n_fev, n_jac=n_jac, n_fev=n_fev, damping=float(mu),
            offset=float(off),
        )

    # workspace of the compiled helpers (free set, damping scale, the Cholesky step): written
    # before it is read, so shared by the starts of a batch
    free, dscale, idx, L, w, s_gn, s = passes.workspace(P)
    first = collector_paused() if not getattr(damped_step, "signatures", True) else nullcontext()
    with single_thread_blas(), first:  # the first call compiles the helpers
        A, g, ssr, finite = sums(theta)
        n_jac += 1
        if not math.isfinite(ssr):
            return result(theta, np.inf, n_iter, -1, mu0)
        if not finite:
            return result(theta, ssr, n_iter, -2, mu0)
        mu, nu = float(mu0), 2.0
        it = 0
        history = []
        while True:
            if ssr <= floor:
                return result(theta, ssr, n_iter + it, 3, mu)
            n_free = free_set(A, g, theta, lower, upper, free, dscale)
            if n_free == 0:
                return result(theta, ssr, n_iter + it, 4, mu)
            # Gauss–Newton decrement on the free parameters: the stopping rule
            eps = _EPS_DECREMENT
            ok = damped_step(A, g, free, dscale, eps, idx, L, w, s_gn)
            while not ok and eps < 1.0:
                eps *= 100.0
                ok = damped_step(A, g, free, dscale, eps, idx, L, w, s_gn)
            decrement = float(-g.dot(s_gn)) if ok else np.inf
            if decrement <= max(tol * ssr, stat_tol * ssr / nm):
                return result(theta, ssr, n_iter + it, 1, mu)
            history.append(ssr)
            if len(history) > STALL_WINDOW and (
                    history[-STALL_WINDOW - 1] - ssr <= STALL_WINDOW * stat_tol * ssr / nm):
                return result(theta, ssr, n_iter + it, 2, mu, window=STALL_WINDOW)
            if it >= max_iter:
                return result(theta, ssr, n_iter + it, 0, mu, max_iter=max_iter,
                              unit="Jacobian passes")
            it += 1
            accepted = False
            while mu <= _MU_MAX:
                ok = damped_step(A, g, free, dscale, mu, idx, L, w, s)
                if not ok:  # singular / indefinite in rounding: more damping
                    mu *= nu
                    nu *= 2.0
                    continue
                cand = np.minimum(np.maximum(theta + s, lower), upper)  # on the box
                d = cand - theta
                # decrease of ½Σr² the model predicts (ndarray.dot: the BLAS calls of `@`)
                pred = -(g.dot(d) + 0.5 * d.dot(A.dot(d)))
                if not math.isfinite(pred) or pred <= 0.0:
                    mu *= nu
                    nu *= 2.0
                    continue
                th, off = split(cand)
                # forward pass: the prediction kernel (compiled anyway for data and predict();
                # a dedicated sum-of-squares kernel cost 5.7 s more compilation in a fresh
                # installation) and NumPy's pairwise sum: the same for any thread count
                res = passes.values(th)
                if fit_offset or off != 0.0:
                    res += off - y
                else:  # the same numbers as res + (0 − y)
                    np.subtract(res, y, out=res)
                new_ssr = float(np.add.reduce(np.square(res, out=res)))
                if penalised:
                    new_ssr += float(pen.dot(cand * cand))
                n_fev += 1
                rho = 0.5 * (ssr - new_ssr) / pred if math.isfinite(new_ssr) else -1.0
                if rho > _ACCEPT:
                    theta = cand
                    mu *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
                    mu = max(mu, 1e-12)
                    nu = 2.0
                    accepted = True
                    break
                mu *= nu
                nu *= 2.0
            if not accepted:
                ok = decrement <= max(1e-6 * ssr, 1e6 * floor)
                return result(theta, ssr, n_iter + it, 5 if ok else -3, _MU0)
            A_new, g_new, ssr_new, finite = sums(theta)
            n_jac += 1
            if not (math.isfinite(ssr_new) and finite):
                return result(theta, new_ssr, n_iter + it, -4, mu)
            A, g, ssr = A_new, g_new, ssr_new


def _run_one(theta0, passes, y, lower, upper, kwargs):
    kwargs = dict(kwargs)
    if kwargs.pop("fit_intercept", False):  # theta0 and the box end with the intercept c
        kwargs.update(fit_offset=True, offset=float(theta0[-1]))
        theta0, lower, upper = theta0[:-1], lower[:-1], upper[:-1]
    res = _levenberg_marquardt(passes, theta0, y, lower, upper, **kwargs)
    if kwargs.get("fit_offset", False):
        res.theta = np.append(res.theta, res.offset)
    return res


def _run_batch(starts, per_start, problem, n_threads):
    """:func:`_run_one` for each start, with the Numba thread count set once for the batch."""
    # counted in residuals (a layer's sample, a token matrix, holds several)
    below = int(getattr(problem, "serial_below", LM_SERIAL_BELOW))
    if int(getattr(problem, "n_residuals", problem.n_samples)) < below:
        n_threads = 1
    with numba_threads(n_threads):
        passes = problem.passes()
        return [_run_one(t, passes, problem.y, problem.lower, problem.upper, kw)
                for t, kw in zip(starts, per_start)]


def run_lm_starts(starts, problem, *, n_jobs=None, verbose=0, mu0s=None, counts=None,
                  **kwargs):
    """Run :func:`levenberg_marquardt` from every start of ``problem`` (joblib when
    ``n_jobs`` asks).

    ``problem`` is a :class:`~hmoe_estim.solvers.Problem`, or any object with its
    ``n_samples``, ``y``, ``lower``, ``upper`` and ``passes()`` (the kernel passes: see
    :class:`~hmoe_estim.kernels.KernelPasses`): the iterations know no parameter layout.
    ``kwargs`` go to :func:`levenberg_marquardt`, except ``fit_intercept=True``: then every
    start and the bounds end with the intercept ``c`` (the layout of
    ``kernels.objective.objective_and_gradient`` and of
    ``solvers._lbfgsb.run_starts``), and so does every result's ``theta``.
    To resume starts, ``mu0s`` gives each its damping and ``counts`` its
    ``(n_jac, n_fev, n_iter)`` so far. Returns the list of
    :class:`~hmoe_estim.solvers.SolveResult` in start order.
    """
    import os

    from joblib import Parallel, delayed, effective_n_jobs

    per_start = []
    for j in range(len(starts)):
        kw = dict(kwargs)
        if mu0s is not None:
            kw["mu0"] = mu0s[j]
        if counts is not None:
            kw["n_jac"], kw["n_fev"], kw["n_iter"] = counts[j]
        per_start.append(kw)
    if not starts:
        return []
    jobs = min(effective_n_jobs(n_jobs), len(starts))
    if jobs <= 1:
        with single_thread_blas():
            return _run_batch(starts, per_start, problem, None)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    batches = Parallel(n_jobs=jobs, verbose=max(0, verbose - 1))(
        delayed(_run_batch)([t], [kw], problem, threads)
        for t, kw in zip(starts, per_start)
    )
    return [r for batch in batches for r in batch]
