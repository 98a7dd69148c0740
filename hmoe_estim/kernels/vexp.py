"""A vectorisable ``exp`` on blocks of samples.

Numba's ``math.exp`` is a scalar libm call unless LLVM has Intel's SVML, which the PyPI
builds of llvmlite lack; a call in a loop then blocks vectorisation of the whole loop. This
kernel computes ``exp`` with plain arithmetic that LLVM vectorises:

    x = k·ln2 + r,  k = round(x / ln2),  |r| <= ln2 / 2     (Cody–Waite reduction, ln2 split
                                                             into a high and a low part)
    exp(r) ≈ Σ_{j<=13} r^j / j!                              (Horner; truncation < 5e-18)
    exp(x) = 2^k · exp(r),  2^k built from its IEEE-754 bits

Accuracy: within a few ulp of libm (tested against ``numpy.exp``) for
``-708.39 <= x <= 709.08``; below, 0 (the subnormal range is flushed); above, ``inf`` (the
last 0.7 of the finite range is given up so that ``k + 1023`` always fits the exponent
field — the kernels only take ``exp`` of non-positive numbers). NaN propagates. Of the fastmath flags only ``contract`` (fused multiply-add) is set: the reduction
relies on the evaluation order, which ``reassoc`` would allow LLVM to change.
"""

import numpy as np
from numba import njit

_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 with the last bits zeroed: k·_LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_TWO52 = 2.0**52  # adding it puts a small integer in the low mantissa bits
_XMAX = 709.08
_XMIN = -708.3964185322641

# Taylor coefficients 1/j!, j = 2 .. 13 (the polynomial is unrolled so that LLVM vectorises it)
_C2, _C3, _C4, _C5 = 1 / 2, 1 / 6, 1 / 24, 1 / 120
_C6, _C7, _C8, _C9 = 1 / 720, 1 / 5040, 1 / 40320, 1 / 362880
_C10, _C11, _C12, _C13 = 1 / 3628800, 1 / 39916800, 1 / 479001600, 1 / 6227020800


@njit(cache=True, fastmath={"contract"})
def exp_block(x, out, bits, b):
    """``out[:b] = exp(x[:b])``; ``bits`` is scratch of the same length (float64)."""
    for t in range(b):
        xt = x[t]
        xt = _XMIN if xt < _XMIN else xt
        xt = _XMAX if xt > _XMAX else xt
        kf = np.floor(xt * _LOG2E + 0.5)
        r = (xt - kf * _LN2_HI) - kf * _LN2_LO
        p = _C13 * r + _C12
        p = p * r + _C11
        p = p * r + _C10
        p = p * r + _C9
        p = p * r + _C8
        p = p * r + _C7
        p = p * r + _C6
        p = p * r + _C5
        p = p * r + _C4
        p = p * r + _C3
        p = p * r + _C2
        p = p * r + 1.0
        out[t] = p * r + 1.0
        # 2^k: k + 1023 in [1, 2046] lands in the low mantissa bits of 2^52 + k + 1023
        bits[t] = kf + (_TWO52 + 1023.0)
    ib = bits.view(np.int64)
    for t in range(b):
        ib[t] = ib[t] << 52
    for t in range(b):
        xt = x[t]
        v = out[t] * bits[t]
        v = 0.0 if xt < _XMIN else v
        v = np.inf if xt > _XMAX else v
        out[t] = xt if xt != xt else v
