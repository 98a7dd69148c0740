"""The token gate ``g[h, i](x) = softmax_i(xᵀ M[h, i] x)`` on a block of samples (paper eq. (2)).

``M[h, N-1] = 0`` (assumption (A.3)), so only the ``N-1`` free matrices are stored, as upper
triangles (see ``hmoe_estim/model/_parameters.py``). The quadratic forms use the pair products
``xx[pq] = c_pq x_p x_q`` shared by every ``M[h, i]`` (:func:`pair_products`; the forward pass
combines them with the triangles). The softmax subtracts the row maximum
before ``exp``: no overflow for any finite input.
"""

from numba import njit

from .target import FASTMATH, INTERNAL, wide_vectors
from .vexp import vexp

_FM = FASTMATH


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def pair_products(x, xx, b):
    """``xx[pq, t] = c_pq x[p, t] x[q, t]`` for ``p <= q`` row-major, ``c_pq = 2`` off-diagonal."""
    wide_vectors()
    D = x.shape[0]
    pq = 0
    for p in range(D):
        for q in range(p, D):
            c = 1.0 if p == q else 2.0
            for t in range(b):
                xx[pq, t] = c * x[p, t] * x[q, t]
            pq += 1


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def gate_softmax(h, N, s, g, work, b):
    """Softmax gate of head ``h`` on a block, from its quadratic forms: rows ``h*N .. h*N+N-1``
    of ``g``.

    Parameters
    ----------
    h, N : int
        Head and number of tokens.
    s : ndarray (N, B)
        ``s[i] = xᵀ M[h, i] x`` for the free tokens ``i < N-1`` (the caller forms them with
        :func:`~.rows.combine_rows` from the upper triangles of ``M[h, i]`` and the pair
        products of :func:`pair_products`); the last token's form is 0 (A.3).
    g : ndarray (H*N, B)
        Output: the gate values, row ``h*N + i`` for token ``i``.
    work : ndarray (2, B)
        Scratch: the row maximum, then the reciprocal of the sum.
    b : int
        Number of valid samples in the block.

    The quadratic forms are not formed here so that the row combination is not compiled into
    this function too (it would be compiled once more for every compiled caller up the chain).
    """
    wide_vectors()
    r0 = h * N
    last = r0 + N - 1
    if N == 1:
        for t in range(b):
            g[r0, t] = 1.0
        return
    # stable softmax over tokens: subtract the max, exponentiate, normalise. The last token's
    # form is 0 (A.3), so the max starts at 0. Every loop runs over the block innermost.
    # (max(a, b) written out as Numba's own select: the same values, no compiled overload)
    for t in range(b):
        v = s[0, t]
        work[0, t] = 0.0 if 0.0 > v else v
    for i in range(1, N - 1):
        for t in range(b):
            v = s[i, t]
            w = work[0, t]
            work[0, t] = v if v > w else w
    for t in range(b):
        e = vexp(-work[0, t])
        g[last, t] = e
        work[1, t] = e
    for i in range(N - 1):
        for t in range(b):
            e = vexp(s[i, t] - work[0, t])
            g[r0 + i, t] = e
            work[1, t] += e
    for t in range(b):
        q = 1.0 / work[1, t]
        work[1, t] = q
        g[last, t] *= q
    for i in range(N - 1):
        for t in range(b):
            g[r0 + i, t] *= work[1, t]
