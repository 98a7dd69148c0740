"""A vectorisable ``exp``: a scalar function that LLVM inlines and vectorises across samples.

Numba's ``math.exp`` is a scalar libm call unless LLVM has Intel's SVML, which the PyPI
builds of llvmlite lack; a call in a loop then blocks vectorisation of the whole loop. This
kernel computes ``exp`` with plain arithmetic that LLVM vectorises:

    x = k·ln2 + r,  k = round(x / ln2),  |r| <= ln2 / 2     (Cody–Waite reduction, ln2 split
                                                             into a high and a low part)
    exp(r) ≈ p(r), p of degree 11                            (Horner; near-minimax on
                                                             |r| <= ln2/2, error 3.2e-18)
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

from .target import INTERNAL, wide_vectors

_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 with the last bits zeroed: k·_LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_TWO52 = 2.0**52
_XMAX = 709.08
_XMIN = -708.3964185322641

# Coefficients of p, degree 0 .. 11: the Chebyshev (near-minimax) fit of exp on
# [-ln2/2, ln2/2], computed with mpmath.chebyfit at 50 digits and rounded to float64 (max
# error 3.2e-18, a thirtieth of an ulp; two multiply-adds fewer than the Taylor series of the
# same accuracy).
_P2, _P3, _P4 = 0.5000000000000019, 0.1666666666666668, 0.0416666666664881
_P5, _P6, _P7 = 0.008333333333319601, 0.0013888888952314775, 0.00019841269890047113
_P8, _P9, _P10 = 2.4801485482328494e-05, 2.755724091857897e-06, 2.763263963904103e-07
_P11 = 2.5110037605963777e-08

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


@njit(cache=True, error_model="numpy", fastmath={"contract"}, **INTERNAL)
def vexp(x):
    """``exp(x)`` for a float64 scalar, in straight-line arithmetic (see the module docstring)."""
    # clamp to the representable range; NaN fails both tests, stays NaN through the
    # arithmetic (its shifted bits give a scale of 0, NaN · 0 = NaN) and is returned as NaN
    xt = _XMIN if x < _XMIN else x
    xt = _XMAX if xt > _XMAX else xt
    kf = np.floor(xt * _LOG2E + 0.5)
    r = (xt - kf * _LN2_HI) - kf * _LN2_LO
    p = _P11 * r + _P10
    p = p * r + _P9
    p = p * r + _P8
    p = p * r + _P7
    p = p * r + _P6
    p = p * r + _P5
    p = p * r + _P4
    p = p * r + _P3
    p = p * r + _P2
    p = p * r + 1.0
    p = p * r + 1.0
    v = p * _float(_bits(kf + (_TWO52 + 1023.0)) << 52)
    v = 0.0 if x < _XMIN else v
    return np.inf if x > _XMAX else v


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def exp_block(x, out, b):
    """``out[:b] = exp(x[:b])`` for 1-D arrays."""
    wide_vectors()
    for t in range(b):
        out[t] = vexp(x[t])
