"""The two compiled helpers of a Levenberg–Marquardt iteration (``solvers/_lm.py``).

:func:`free_set` — the parameters not held at a bound of the box by the gradient, and the
damping scale; :func:`damped_step` — the damped Gauss–Newton step on them by Cholesky. Both
write into the caller's workspace (:class:`LMWorkspace`, which the passes objects own)
and allocate nothing, so nothing but these two functions compiles on a cold start.
"""

import numpy as np
from numba import njit

__all__ = ["damped_step", "free_set", "LMWorkspace"]


class LMWorkspace:
    """The scratch arrays of :func:`free_set` and :func:`damped_step`, one set per number of
    parameters ``P``, kept for the starts of a batch (the passes objects own one)."""

    def __init__(self):
        self._arrays = {}

    def __call__(self, P):
        """``(free, dscale, idx, L, w, s_gn, s)`` for ``P`` parameters."""
        ws = self._arrays.get(P)
        if ws is None:
            ws = self._arrays[P] = (
                np.empty(P, dtype=np.bool_), np.empty(P), np.empty(P, dtype=np.int64),
                np.empty((P, P)), np.empty(P), np.empty(P), np.empty(P))
        return ws


@njit(cache=True)
def damped_step(A, g, free, dscale, mu, idx, L, w, s):
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
def free_set(A, g, theta, lower, upper, free, dscale):
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
