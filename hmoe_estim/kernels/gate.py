"""The token gate ``g[h, i](x) = softmax_i(xᵀ M[h, i] x)`` on a block of samples (SPEC §1).

``M[h, N-1] = 0`` (assumption (A.3)), so only the ``N-1`` free matrices are stored, as upper
triangles (see :mod:`hmoe_estim.parameters`). The quadratic forms use the pair products
``xx[pq] = c_pq x_p x_q`` shared by every ``M[h, i]``. The softmax subtracts the row maximum
before ``exp``: no overflow for any finite input.
"""

from numba import njit

from .rows import combine_rows
from .vexp import exp_block

_FM = {"reassoc", "contract"}


@njit(cache=True, fastmath=_FM)
def pair_products(x, xx, b):
    """``xx[pq, t] = c_pq x[p, t] x[q, t]`` for ``p <= q`` row-major, ``c_pq = 2`` off-diagonal."""
    D = x.shape[0]
    pq = 0
    for p in range(D):
        xp = x[p]
        for q in range(p, D):
            xq = x[q]
            out = xx[pq]
            c = 1.0 if p == q else 2.0
            for t in range(b):
                out[t] = c * xp[t] * xq[t]
            pq += 1


@njit(cache=True, fastmath=_FM)
def gate_block(tri_h, xx, s, g_h, work, b):
    """Softmax gate of one head on a block.

    Parameters
    ----------
    tri_h : ndarray (N-1, T)
        Upper triangles of ``M[h, 0..N-2]``.
    xx : ndarray (T, B)
        Pair products from :func:`pair_products`.
    s : ndarray (N, B)
        Scratch for the quadratic forms ``xᵀ M[h, i] x``.
    g_h : ndarray (N, B)
        Output: the gate values ``g[h, i]``.
    work : ndarray (B,)
        Scratch.
    b : int
        Number of valid samples in the block.
    """
    N = s.shape[0]
    for i in range(N - 1):
        combine_rows(tri_h[i], xx, s[i], b)
    last = s[N - 1]
    for t in range(b):
        last[t] = 0.0
    # stable softmax over tokens: subtract the max, exponentiate, normalise. Every loop runs
    # over the block innermost, so that it vectorises across samples.
    mx = work
    for t in range(b):
        mx[t] = s[0, t]
    for i in range(1, N):
        si = s[i]
        for t in range(b):
            mx[t] = max(mx[t], si[t])
    for i in range(N):
        si = s[i]
        for t in range(b):
            si[t] -= mx[t]
    for i in range(N):
        exp_block(s[i], g_h[i], work, b)
    tot = work
    g0 = g_h[0]
    for t in range(b):
        tot[t] = g0[t]
    for i in range(1, N):
        gi = g_h[i]
        for t in range(b):
            tot[t] += gi[t]
    for t in range(b):
        tot[t] = 1.0 / tot[t]
    for i in range(N):
        gi = g_h[i]
        for t in range(b):
            gi[t] *= tot[t]
