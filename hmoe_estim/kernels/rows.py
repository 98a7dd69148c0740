"""Linear combinations of rows on a block of samples: the quadratic forms and the experts.

``out[t] = Σ_j c[j] · rows[j, t]`` is ``xᵀ M x`` when the rows are the pair products and ``c``
the upper triangle of ``M``, and ``a·x`` when the rows are the inputs and ``c = a``. The sum is
register-blocked four rows at a time, so that the accumulator is loaded and stored once per
four multiply-adds instead of once per multiply-add.
"""

from numba import njit

_FM = {"reassoc", "contract"}


@njit(cache=True, fastmath=_FM)
def combine_rows(c, rows, out, b):
    """``out[:b] = Σ_j c[j] rows[j, :b]`` for ``j < len(c)``."""
    J = c.shape[0]
    for t in range(b):
        out[t] = 0.0
    j = 0
    while j + 4 <= J:
        c0, c1, c2, c3 = c[j], c[j + 1], c[j + 2], c[j + 3]
        r0, r1, r2, r3 = rows[j], rows[j + 1], rows[j + 2], rows[j + 3]
        for t in range(b):
            out[t] += c0 * r0[t] + c1 * r1[t] + c2 * r2[t] + c3 * r3[t]
        j += 4
    while j < J:
        cj = c[j]
        rj = rows[j]
        for t in range(b):
            out[t] += cj * rj[t]
        j += 1
