"""Row combinations and row dot products on a block of samples: the linear algebra of the kernels.

Every temporary of the kernels is a 2-D array whose rows are quantities and whose columns are
the samples of a block; the functions here take the array and a row index rather than a row
view, because in compiled code a view is a new array object whose reference count is updated
atomically on creation and release — a cost paid per row per block that used to be a third of
the kernel's time.

``combine_rows``: ``out[ro, t] = Σ_j c[c0 + j] · rows[j, t]`` — the quadratic forms ``xᵀ M x``
(rows = pair products, ``c`` = upper triangle of ``M``) and the experts ``a·x`` (rows = inputs).

``accumulate_dots``: ``acc[a0 + j] += Σ_t w[wr, t] · rows[j, t]`` — the gradients with respect
to ``a`` (rows = inputs) and ``M`` (rows = pair products).

Both are register-blocked four rows at a time.
"""

from numba import njit

_FM = {"reassoc", "contract"}


@njit(cache=True, error_model="numpy", fastmath=_FM)
def combine_rows(c, c0, J, rows, out, ro, b):
    """``out[ro, :b] = Σ_{j<J} c[c0 + j] rows[j, :b]``."""
    for t in range(b):
        out[ro, t] = 0.0
    j = 0
    while j + 4 <= J:
        c_0, c_1, c_2, c_3 = c[c0 + j], c[c0 + j + 1], c[c0 + j + 2], c[c0 + j + 3]
        for t in range(b):
            out[ro, t] += (
                c_0 * rows[j, t] + c_1 * rows[j + 1, t] + c_2 * rows[j + 2, t]
                + c_3 * rows[j + 3, t]
            )
        j += 4
    while j < J:
        cj = c[c0 + j]
        for t in range(b):
            out[ro, t] += cj * rows[j, t]
        j += 1


@njit(cache=True, error_model="numpy", fastmath=_FM)
def accumulate_dots(w, wr, rows, J, acc, a0, b):
    """``acc[a0 + j] += Σ_{t<b} w[wr, t] rows[j, t]`` for ``j < J``."""
    j = 0
    while j + 4 <= J:
        s0 = s1 = s2 = s3 = 0.0
        for t in range(b):
            wt = w[wr, t]
            s0 += wt * rows[j, t]
            s1 += wt * rows[j + 1, t]
            s2 += wt * rows[j + 2, t]
            s3 += wt * rows[j + 3, t]
        acc[a0 + j] += s0
        acc[a0 + j + 1] += s1
        acc[a0 + j + 2] += s2
        acc[a0 + j + 3] += s3
        j += 4
    while j < J:
        s0 = 0.0
        for t in range(b):
            s0 += w[wr, t] * rows[j, t]
        acc[a0 + j] += s0
        j += 1
