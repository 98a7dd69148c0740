"""Row combinations and row dot products on a block of samples: the linear algebra of the kernels.

Every temporary of the kernels is a 2-D array whose rows are quantities and whose columns are
the samples of a block; the functions here take the array and a row index rather than a row
view, because in compiled code a view is a new array object whose reference count is updated
atomically on creation and release — a cost paid per row per block.

``combine_rows``: ``out[ro, t] = Σ_j c[c0 + j] · rows[j, t]`` — the quadratic forms ``xᵀ M x``
(rows = pair products, ``c`` = upper triangle of ``M``) and the experts ``a·x`` (rows = inputs).

``accumulate_dots``: ``acc[a0 + j] += scale · Σ_t p[pr, t] · q[qr, t] · rows[j, t]`` — the
gradients with respect to ``a`` (rows = inputs) and ``M`` (rows = pair products); the weight
of each sample is the product of two rows, formed on the fly.

``gated_sum``: ``out[t] = Σ_i g[r0 + i, t] · vals[r0 + i, t]`` — a head's output
``f_h = Σ_i g_i v_i`` from its gate and its per-token values.

The first two work on four rows at a time (one pass over the block per four rows, the remainder
of one to three rows in one more pass): each pass over the block has a fixed cost (loop set-up,
alias checks, the final horizontal sums), so fewer, fuller passes are faster.
"""

from numba import njit

from .target import FASTMATH, INTERNAL, wide_vectors

_FM = FASTMATH


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def combine_rows(c, c0, J, rows, out, ro, b):
    """``out[ro, :b] = Σ_{j<J} c[c0 + j] rows[j, :b]`` (``J >= 1``)."""
    wide_vectors()
    j = 0
    while j < J:
        m = J - j if J - j < 4 else 4  # min(4, J - j) without a compiled overload
        c_0 = c[c0 + j]
        c_1 = c[c0 + j + 1] if m > 1 else 0.0
        c_2 = c[c0 + j + 2] if m > 2 else 0.0
        c_3 = c[c0 + j + 3] if m > 3 else 0.0
        if j == 0:
            if m == 4:
                for t in range(b):
                    out[ro, t] = (
                        c_0 * rows[0, t] + c_1 * rows[1, t] + c_2 * rows[2, t] + c_3 * rows[3, t]
                    )
            elif m == 3:
                for t in range(b):
                    out[ro, t] = c_0 * rows[0, t] + c_1 * rows[1, t] + c_2 * rows[2, t]
            elif m == 2:
                for t in range(b):
                    out[ro, t] = c_0 * rows[0, t] + c_1 * rows[1, t]
            else:
                for t in range(b):
                    out[ro, t] = c_0 * rows[0, t]
        else:
            if m == 4:
                for t in range(b):
                    out[ro, t] += (
                        c_0 * rows[j, t] + c_1 * rows[j + 1, t] + c_2 * rows[j + 2, t]
                        + c_3 * rows[j + 3, t]
                    )
            elif m == 3:
                for t in range(b):
                    out[ro, t] += c_0 * rows[j, t] + c_1 * rows[j + 1, t] + c_2 * rows[j + 2, t]
            elif m == 2:
                for t in range(b):
                    out[ro, t] += c_0 * rows[j, t] + c_1 * rows[j + 1, t]
            else:
                for t in range(b):
                    out[ro, t] += c_0 * rows[j, t]
        j += m


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def accumulate_dots(p, pr, q, qr, scale, rows, J, acc, a0, b):
    """``acc[a0 + j] += scale Σ_{t<b} p[pr, t] q[qr, t] rows[j, t]`` for ``j < J``."""
    wide_vectors()
    j = 0
    while j < J:
        m = J - j if J - j < 4 else 4  # min(4, J - j) without a compiled overload
        s0 = s1 = s2 = s3 = 0.0
        if m == 4:
            for t in range(b):
                w = p[pr, t] * q[qr, t]
                s0 += w * rows[j, t]
                s1 += w * rows[j + 1, t]
                s2 += w * rows[j + 2, t]
                s3 += w * rows[j + 3, t]
        elif m == 3:
            for t in range(b):
                w = p[pr, t] * q[qr, t]
                s0 += w * rows[j, t]
                s1 += w * rows[j + 1, t]
                s2 += w * rows[j + 2, t]
        elif m == 2:
            for t in range(b):
                w = p[pr, t] * q[qr, t]
                s0 += w * rows[j, t]
                s1 += w * rows[j + 1, t]
        else:
            for t in range(b):
                s0 += p[pr, t] * q[qr, t] * rows[j, t]
        acc[a0 + j] += scale * s0
        if m > 1:
            acc[a0 + j + 1] += scale * s1
        if m > 2:
            acc[a0 + j + 2] += scale * s2
        if m > 3:
            acc[a0 + j + 3] += scale * s3
        j += m


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def gated_sum(g, vals, r0, N, out, b):
    """``out[:b] = Σ_{i<N} g[r0 + i, :b] vals[r0 + i, :b]`` (1-D ``out``)."""
    wide_vectors()
    for t in range(b):
        out[t] = g[r0, t] * vals[r0, t]
    for i in range(1, N):
        for t in range(b):
            out[t] += g[r0 + i, t] * vals[r0 + i, t]
