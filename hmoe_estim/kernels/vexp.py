"""A vectorisable ``exp``: a scalar function that LLVM inlines and vectorises across samples.

Numba's ``math.exp`` is a scalar libm call unless LLVM has Intel's SVML, which the PyPI
builds of llvmlite lack; a call in a loop then blocks vectorisation of the whole loop. This
kernel computes ``exp`` with plain arithmetic that LLVM vectorises:

    x = k·ln2 + r,  k = round(x / ln2),  |r| <= ln2 / 2     (Cody–Waite reduction, ln2 split
                                                             into a high and a low part)
    exp(r) ≈ Σ_{j<=13} r^j / j!                              (Horner; truncation < 5e-18)
    exp(x) = 2^k · exp(r),  2^k built from its IEEE-754 bits

``2^k`` is made without a float-to-integer conversion: adding ``2^52 + 1023`` to ``k`` puts
``k + 1023`` in the low mantissa bits, and shifting the bit pattern left by 52 moves it to the
exponent field. The two reinterpretations (float64 ↔ int64 bits) are LLVM ``bitcast``
intrinsics, so the whole function is straight-line arithmetic and one call sits inside any loop
without breaking its vectorisation. With ``NUMBA_DISABLE_JIT=1`` the same function runs as
Python, with NumPy views in place of the bitcasts.

Accuracy: within a few ulp of libm (tested against ``numpy.exp``) for
``-708.39 <= x <= 709.08``; below, 0 (the subnormal range is flushed); above, ``inf`` (the
last 0.7 of the finite range is given up so that ``k + 1023`` always fits the exponent
field — the kernels only take ``exp`` of non-positive numbers). NaN propagates. Of the
fastmath flags only ``contract`` (fused multiply-add) is set: the reduction relies on the
evaluation order, which ``reassoc`` would allow LLVM to change.
"""

import numba
import numpy as np
from numba import njit

_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 with the last bits zeroed: k·_LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_TWO52 = 2.0**52
_XMAX = 709.08
_XMIN = -708.3964185322641

# Taylor coefficients 1/j!, j = 2 .. 13 (unrolled Horner, so that LLVM vectorises it)
_C2, _C3, _C4, _C5 = 1 / 2, 1 / 6, 1 / 24, 1 / 120
_C6, _C7, _C8, _C9 = 1 / 720, 1 / 5040, 1 / 40320, 1 / 362880
_C10, _C11, _C12, _C13 = 1 / 3628800, 1 / 39916800, 1 / 479001600, 1 / 6227020800


if numba.config.DISABLE_JIT:  # interpreted kernels (tests): NumPy views stand in for bitcasts

    def _bits(x):
        return np.float64(x).view(np.int64)

    def _float(i):
        return np.int64(i).view(np.float64)

else:
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def _bits(typingctx, x):
        """The IEEE-754 bit pattern of a float64, as an int64."""

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.IntType(64))

        return types.int64(types.float64), codegen

    @intrinsic
    def _float(typingctx, i):
        """The float64 whose bit pattern is the int64 ``i``."""

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.DoubleType())

        return types.float64(types.int64), codegen


@njit(cache=True, error_model="numpy", fastmath={"contract"}, inline="always")
def vexp(x):
    """``exp(x)`` for a float64 scalar, in straight-line arithmetic (see the module docstring)."""
    xt = x if x > _XMIN else _XMIN  # also maps NaN to _XMIN; NaN is restored at the end
    xt = xt if xt < _XMAX else _XMAX
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
    p = p * r + 1.0
    v = p * _float(_bits(kf + (_TWO52 + 1023.0)) << 52)
    v = 0.0 if x < _XMIN else v
    v = np.inf if x > _XMAX else v
    return x if x != x else v


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def exp_block(x, out, b):
    """``out[:b] = exp(x[:b])`` for 1-D arrays."""
    for t in range(b):
        out[t] = vexp(x[t])
