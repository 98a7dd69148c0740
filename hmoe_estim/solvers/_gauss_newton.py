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
kernel calls (:class:`_Passes`: entry point, buffers, thread count, set once), the BLAS
thread limit is set once per batch, and an iteration makes only the NumPy calls the step
needs. Results are the same bits as with the kernels' wrappers
(``tests/test_gauss_newton_passes.py``).
"""

import math
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial as partial_call

import numpy as np
from numba import njit

from .._names import ACTIVATION_CODES, GATE_CODES
from ..kernels.objective import chunk_total, mixed_values, penalty_weights
from ..kernels.target import collector_paused
from ..model import n_params
from ._multistart import StartResult

__all__ = ["LMResult", "levenberg_marquardt", "run_lm_starts", "STAT_TOL"]

_MU0 = 1e-3
_MU_MAX = 1e16
_EPS_DECREMENT = 1e-10
_ACCEPT = 1e-4
#: Default ``stat_tol``: a decrease of the objective below 1% of ``σ²/n`` is statistically
#: irrelevant (the objective itself fluctuates by ``σ² √(2/n)`` between data sets).
STAT_TOL = 1e-2
#: Below this many samples the LM kernels run on one thread (L-BFGS-B's threshold is
#: ``optim.SERIAL_BELOW`` = 512). LM makes two short kernel calls per iteration, and the race
#: runs 128 candidates on at most 4096 samples: there a second thread saves little compute
#: and every call waits for it to wake — on a loaded machine milliseconds per call (measured
#: in a default fit at n = 1e4: 2.7 ms per forward pass on 4096 samples with 2 threads).
LM_SERIAL_BELOW = 8192
#: Iterations over which the stall rule looks back.
STALL_WINDOW = 10


@dataclass
class LMResult(StartResult):
    """A :class:`~hmoe_estim.solvers._multistart.StartResult` with the kernel passes and the final
    damping.

    ``n_passes = n_jac + n_fev``; ``n_jac``: calls of the Jacobian kernel (one per iteration, plus
    the start);
    ``n_fev``: calls of the forward-only sum of squares (trial points);
    ``damping``: the final ``μ`` (to resume the start); ``offset``: the fitted intercept
    (0 unless ``fit_offset``).
    """

    n_jac: int = 0
    n_fev: int = 0
    damping: float = _MU0
    offset: float = 0.0

    def __post_init__(self):
        self.n_passes = self.n_jac + self.n_fev


class _single_thread_blas:
    """Limit the BLAS to one thread, once per batch of starts.

    The P × P factorisations are tiny; a multi-threaded BLAS would only spin threads that
    steal the cores of the Numba kernels. Nested uses are free. The thread-pool controller
    (a scan of the loaded libraries: ~3 ms, as much as the race of a small fit's
    iterations save elsewhere) is made once and made again only when modules were imported
    since, which may have loaded another BLAS.
    """

    _depth = 0
    _controller = None
    _n_modules = -1

    def __enter__(self):
        if _single_thread_blas._depth == 0:
            cls = _single_thread_blas
            if cls._controller is None or cls._n_modules != len(sys.modules):
                from threadpoolctl import ThreadpoolController

                cls._controller = ThreadpoolController()
                cls._n_modules = len(sys.modules)
            self._ctx = cls._controller.limit(limits=1, user_api="blas")
        else:
            self._ctx = None
        _single_thread_blas._depth += 1
        return self

    def __exit__(self, *exc):
        _single_thread_blas._depth -= 1
        if self._ctx is not None:
            self._ctx.unregister()
        return False


@njit(cache=True)
def _damped_step(A, g, free, dscale, mu, idx, L, w, s):
    """``s_F = −(A_FF + μ diag(d_F))⁻¹ g_F`` by Cholesky, written into ``s`` (zero off ``F``);
    returns False (and ``s = 0``) if the factorisation fails (``A_FF`` singular or indefinite in
    rounding) or ``s`` is not finite.

    ``idx`` (P, int64), ``L`` (P × P, its leading m × m block the factor), ``w`` (P) and ``s``
    (P) are the caller's workspace: no allocation here, so nothing but this function compiles
    on a cold start.
    """
    P = g.shape[0]
    m = 0
    for p in range(P):
        s[p] = 0.0
        if free[p]:
            idx[m] = p
            m += 1
    for i in range(m):
        for j in range(i + 1):
            v = A[idx[i], idx[j]]
            if i == j:
                v += mu * dscale[idx[i]]
            for k in range(j):
                v -= L[i, k] * L[j, k]
            if i == j:
                if not (v > 0.0):  # also catches NaN
                    return False
                L[i, i] = np.sqrt(v)
            else:
                L[i, j] = v / L[j, j]
    for i in range(m):  # L w = −g_F
        v = -g[idx[i]]
        for k in range(i):
            v -= L[i, k] * w[k]
        w[i] = v / L[i, i]
    for i in range(m - 1, -1, -1):  # Lᵀ s_F = w
        v = w[i]
        for k in range(i + 1, m):
            v -= L[k, i] * s[idx[k]]
        s[idx[i]] = v / L[i, i]
    for p in range(P):
        if not np.isfinite(s[p]):
            for q in range(P):
                s[q] = 0.0
            return False
    return True


@njit(cache=True)
def _free_set(A, g, theta, lower, upper, free, dscale):
    """The free set and the damping scale of an iteration, in one call (a dozen small-array
    NumPy calls cost as much as the kernel on a race's subsample); returns ``n_free``.

    ``free``: not held at a bound by the gradient; ``dscale = max(diag A, 1e-12 · max diag A)``
    (``1e-300`` at least), both written into the caller's arrays; ``n_free``: how many are free.
    """
    P = g.shape[0]
    dmax = 0.0
    for p in range(P):
        if A[p, p] > dmax:
            dmax = A[p, p]
    # max(a, b) written out as Numba's own select (b if b > a else a): no compiled overload
    floor = 1e-12 * (1e-300 if 1e-300 > dmax else dmax)
    n_free = 0
    for p in range(P):
        d = A[p, p]
        dscale[p] = floor if floor > d else d
        held = (theta[p] <= lower[p] and g[p] > 0) or (theta[p] >= upper[p] and g[p] < 0)
        free[p] = not held
        if not held:
            n_free += 1
    return n_free


class _Passes:
    """The two kernel passes of the iterations, set up once for the starts on one data set.

    ``sums(theta, offset)`` returns what
    :func:`~hmoe_estim.kernels.jacobian.gauss_newton_sums` returns, followed by whether
    ``JᵀJ``, ``Jᵀr`` and ``Σ r²`` are all finite; ``values(theta)`` returns what
    :func:`~hmoe_estim.kernels.objective.predict` returns, in a buffer that the next call
    overwrites. Both run the compiled pass of those functions with the same arguments and
    chunks, added in the same order — the same bits — but skip their per-call set-up (entry
    point, layout, buffers, thread count, array checks), which on the race's subsamples of a
    linear gate (1024 samples) cost a quarter of the kernel time. The thread count is read
    here once: the caller keeps it fixed while the starts run. ``theta`` must be a
    C-contiguous float64 array that is not modified afterwards: the mixed values
    ``b = Σ_k ω_k a_k`` of the linear gates are kept from one call to the next with the same
    ``theta`` object (a trial point's forward pass, then its sums once accepted).
    """

    def __init__(self, XT, y, shape, g_code, a_code):
        from ..kernels.jacobian import _entry, _jchunks, _symmetric_index
        from ..kernels.objective import GATE_NONE, GATE_OUTPUT, _chunks, kernel_threads

        H, N, K, D = (int(v) for v in shape)
        XT = np.ascontiguousarray(XT, dtype=np.float64)
        yc = np.ascontiguousarray(y, dtype=np.float64)
        n = XT.shape[1]
        P = n_params(H, N, K, D)
        ntri = P * (P + 1) // 2
        width = ntri + 2 * P + 2  # per chunk: [JᵀJ upper | Jᵀr | Σr² | ΣJ | Σr]
        partial = np.zeros((_jchunks(n, width)[1], width))
        no_sums = np.zeros((_chunks(n)[1], 0))  # a forward pass: the chunks only split the work
        out = np.empty(n)
        sym = _symmetric_index(P)
        zeros = np.zeros(ntri + P + 1)
        empty = np.zeros(0)
        self.n, self.shape = n, (H, N, K, D)
        self.penalty_weights = None
        # rounding level of Σ r²: residuals of a few ulp of the targets (module docstring)
        nm = n if n > 0 else 1
        self.floor = nm * (1e-13 * (float(np.sqrt(np.mean(y ** 2))) if n > 0 else 0.0)) ** 2
        nthreads = kernel_threads(n)
        entry = _entry(nthreads > 1, g_code, a_code)
        if nthreads <= 1:
            run = partial_call(entry, 0, 1)
        else:
            def run(*args):
                return entry(*args, nthreads)
        linear = g_code == GATE_NONE or g_code == GATE_OUTPUT
        last = [None, empty]  # the theta of the last call and its mixed values

        def mixed(theta):
            if not linear:
                return empty  # what mixed_values returns for the other gates
            if theta is not last[0]:
                last[0], last[1] = theta, mixed_values(theta, H, N, K, D, g_code)
            return last[1]

        def values(theta):
            run(theta, XT, empty, 0.0, mixed(theta), H, N, K, g_code, a_code, no_sums, out,
                False)
            return out

        def sums(theta, offset):
            partial.fill(0.0)
            run(theta, XT, yc, float(offset), mixed(theta), H, N, K, g_code, a_code, partial,
                empty, True)
            total = chunk_total(partial)
            # JᵀJ, Jᵀr and Σr² all finite iff Σ_p total_p · 0 is: a finite entry gives ±0,
            # an infinite or NaN one NaN (one dot product instead of isfinite(...).all())
            finite = math.isfinite(total[:ntri + P + 1].dot(zeros))
            return (total[sym], total[ntri:ntri + P], float(total[ntri + P]),
                    total[ntri + P + 1:ntri + 2 * P + 1], float(total[ntri + 2 * P + 1]), finite)

        self.values, self.sums = values, sums
        self._workspace = {}

    def workspace(self, P):
        """Scratch arrays of :func:`_free_set` and :func:`_damped_step` for ``P`` parameters."""
        ws = self._workspace.get(P)
        if ws is None:
            ws = self._workspace[P] = (
                np.empty(P, dtype=np.bool_), np.empty(P), np.empty(P, dtype=np.int64),
                np.empty((P, P)), np.empty(P), np.empty(P), np.empty(P))
        return ws


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
    LMResult
        ``objective`` is the mean squared residual ``Σ r² / n``, plus the penalty when
        ``alpha > 0`` — the value of ``objective_and_gradient`` at the result.
    """
    passes = _Passes(XT, y, shape, GATE_CODES[gate], ACTIVATION_CODES[activation])
    return _levenberg_marquardt(
        passes, theta0, y, lower, upper, max_iter=max_iter, tol=tol, stat_tol=stat_tol,
        mu0=mu0, offset=offset, fit_offset=fit_offset, alpha=alpha, n_jac=n_jac, n_fev=n_fev,
        n_iter=n_iter)


def _levenberg_marquardt(passes, theta0, y, lower, upper, *, max_iter=200, tol=1e-9,
                         stat_tol=STAT_TOL, mu0=_MU0, offset=0.0, fit_offset=False, alpha=0.0,
                         n_jac=0, n_fev=0, n_iter=0):
    """:func:`levenberg_marquardt` on the data of ``passes`` (a :class:`_Passes`)."""
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
        if passes.penalty_weights is None:
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

    def result(t, ssr, it, converged, message, mu):
        th, off = split(t)
        return LMResult(
            theta=th.copy(), objective=float(ssr / nm) if math.isfinite(ssr) else np.inf,
            n_iter=it, converged=converged, message=message, n_jac=n_jac, n_fev=n_fev,
            damping=float(mu), offset=float(off),
        )

    # workspace of the compiled helpers (free set, damping scale, the Cholesky step): written
    # before it is read, so shared by the starts of a batch
    free, dscale, idx, L, w, s_gn, s = passes.workspace(P)
    first = collector_paused() if not _damped_step.signatures else nullcontext()
    with _single_thread_blas(), first:  # the first call compiles the helpers
        A, g, ssr, finite = sums(theta)
        n_jac += 1
        if not math.isfinite(ssr):
            return result(theta, np.inf, n_iter, False,
                          "the objective is not finite at the start", mu0)
        if not finite:
            return result(theta, ssr, n_iter, False,
                          "the Jacobian is not finite at the start", mu0)
        mu, nu = float(mu0), 2.0
        it = 0
        history = []
        while True:
            if ssr <= floor:
                return result(theta, ssr, n_iter + it, True,
                              "the residuals are at rounding level", mu)
            n_free = _free_set(A, g, theta, lower, upper, free, dscale)
            if n_free == 0:
                return result(theta, ssr, n_iter + it, True,
                              "every parameter is held at a bound", mu)
            # Gauss–Newton decrement on the free parameters: the stopping rule
            eps = _EPS_DECREMENT
            ok = _damped_step(A, g, free, dscale, eps, idx, L, w, s_gn)
            while not ok and eps < 1.0:
                eps *= 100.0
                ok = _damped_step(A, g, free, dscale, eps, idx, L, w, s_gn)
            decrement = float(-g.dot(s_gn)) if ok else np.inf
            if decrement <= max(tol * ssr, stat_tol * ssr / nm):
                return result(theta, ssr, n_iter + it, True,
                              "the Gauss-Newton decrement is below tolerance", mu)
            history.append(ssr)
            if len(history) > STALL_WINDOW and (
                    history[-STALL_WINDOW - 1] - ssr <= STALL_WINDOW * stat_tol * ssr / nm):
                return result(theta, ssr, n_iter + it, True,
                              f"stalled: decrease over {STALL_WINDOW} iterations below "
                              "stat_tol per iteration", mu)
            if it >= max_iter:
                return result(theta, ssr, n_iter + it, False,
                              f"reached max_iter={max_iter} Jacobian passes", mu)
            it += 1
            accepted = False
            while mu <= _MU_MAX:
                ok = _damped_step(A, g, free, dscale, mu, idx, L, w, s)
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
                msg = ("no decrease measurable in floating point" if ok else
                       "the damping grew past 1e16 without a decrease")
                return result(theta, ssr, n_iter + it, ok, msg, _MU0)
            A_new, g_new, ssr_new, finite = sums(theta)
            n_jac += 1
            if not (math.isfinite(ssr_new) and finite):
                return result(theta, new_ssr, n_iter + it, False,
                              "the Jacobian is not finite at the accepted point", mu)
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


def _run_batch(starts, per_start, XT, y, shape, gate, activation, lower, upper, n_threads):
    """:func:`_run_one` for each start, with the Numba thread count set once for the batch."""
    import numba

    previous = numba.get_num_threads()
    threads = previous if n_threads is None else n_threads
    if XT.shape[1] < LM_SERIAL_BELOW:
        threads = 1
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        passes = _Passes(XT, y, shape, GATE_CODES[gate], ACTIVATION_CODES[activation])
        return [_run_one(t, passes, y, lower, upper, kw) for t, kw in zip(starts, per_start)]
    finally:
        numba.set_num_threads(previous)


def run_lm_starts(starts, XT, y, shape, gate, activation, bounds, *, n_jobs=None, verbose=0,
                  mu0s=None, counts=None, **kwargs):
    """Run :func:`levenberg_marquardt` from every start (joblib when ``n_jobs`` asks).

    ``kwargs`` go to :func:`levenberg_marquardt`, except ``fit_intercept=True``: then every
    start and the bounds end with the intercept ``c`` (the layout of
    ``kernels.objective.objective_and_gradient`` and of
    ``solvers._multistart.run_starts``), and so does every result's ``theta``.
    To resume starts, ``mu0s`` gives each its damping and ``counts`` its
    ``(n_jac, n_fev, n_iter)`` so far. Returns the list of :class:`LMResult` in start order.
    """
    import os

    from joblib import Parallel, delayed, effective_n_jobs

    lower, upper = bounds
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
        with _single_thread_blas():
            return _run_batch(starts, per_start, XT, y, shape, gate, activation, lower, upper,
                              None)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    batches = Parallel(n_jobs=jobs, verbose=max(0, verbose - 1))(
        delayed(_run_batch)([t], [kw], XT, y, shape, gate, activation, lower, upper, threads)
        for t, kw in zip(starts, per_start)
    )
    return [r for batch in batches for r in batch]
