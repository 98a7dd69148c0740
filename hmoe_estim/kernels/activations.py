"""Activations ``φ`` and their derivatives, as Numba kernels on rows of a block of values.

Codes follow :data:`hmoe_estim._names.ACTIVATION_CODES`: 0 sigmoid, 1 tanh, 2 gelu (exact,
with ``erf``), 3 silu. The branch on the code is taken once per row so that the loop over
the block stays tight; sigmoid and silu use the vectorisable :func:`~.vexp.vexp`, so that
their loops vectorise whole; tanh and gelu call libm (``tanh``, ``erf``) one value at a time.

``error_model="numpy"`` (here and in every kernel): with Numba's default, each float
division carries a ZeroDivisionError branch, and that branch alone stops LLVM from
vectorising the loop around it (timings: the documentation's performance page). Under the NumPy
model a division by zero gives inf/NaN as IEEE-754 says; the kernels never divide by a
number that can be zero (``1 + e >= 1``, softmax sums ``>= 1``).
Every formula is stable for any finite input (no overflow to inf/NaN): with
``e = exp(-|z|) <= 1``, ``σ(z) = 1/(1+e)`` for ``z >= 0`` and ``e/(1+e)`` otherwise, and
``σ'(z) = e/(1+e)²`` for both signs.
"""

import math

import numpy as np
from numba import njit

from .._names import ACTIVATION_CODES
from .._validation import check_activation
from .target import INTERNAL, wide_vectors
from .vexp import vexp

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=True, error_model="numpy", fastmath={"contract"}, **INTERNAL)
def activation_rows(code, z, rz, phi, rp, dphi, rd, b):
    """``phi[rp, :b] = φ(z[rz, :b])`` and ``dphi[rd, :b] = φ'(z[rz, :b])`` (2-D arrays)."""
    wide_vectors()
    if code == 0:  # sigmoid
        for t in range(b):
            zt = z[rz, t]
            e = vexp(-abs(zt))  # e = exp(-|z|) <= 1
            q = 1.0 / (1.0 + e)
            eq = e * q
            phi[rp, t] = q if zt >= 0 else eq
            dphi[rd, t] = eq * q
    elif code == 3:  # silu: z σ(z)
        for t in range(b):
            zt = z[rz, t]
            e = vexp(-abs(zt))
            q = 1.0 / (1.0 + e)
            eq = e * q
            pos = zt >= 0
            sig = q if pos else eq
            sig_neg = eq if pos else q  # σ(-z) = 1 - σ(z), without cancellation
            phi[rp, t] = zt * sig
            dphi[rd, t] = sig * (1.0 + zt * sig_neg)
    elif code == 1:  # tanh
        for t in range(b):
            th = math.tanh(z[rz, t])
            phi[rp, t] = th
            dphi[rd, t] = 1.0 - th * th
    else:  # gelu: z Φ(z)
        for t in range(b):
            zt = z[rz, t]
            cdf = 0.5 * (1.0 + math.erf(zt * _INV_SQRT2))
            phi[rp, t] = zt * cdf
            dphi[rd, t] = cdf + zt * _INV_SQRT2PI * vexp(-0.5 * zt * zt)


@njit(cache=True)
def activation_values(code, z):
    """``(φ(z), φ'(z))`` for a 1-D array ``z``."""
    n = z.shape[0]
    z2 = np.ascontiguousarray(z).reshape((1, n))
    phi = np.empty((1, n))
    dphi = np.empty((1, n))
    zero = np.int64(0)  # an int64 row index, as in the kernels: the same compiled signature
    activation_rows(code, z2, zero, phi, zero, dphi, zero, n)
    return phi[0], dphi[0]


def phi(activation, z):
    """``φ(z)`` elementwise for an array of any shape, the activation given by name.

    Plain Python around :func:`activation_values`, for the NumPy code of the metrics and of the
    attention layer, so that they use the kernels' own values of ``φ``.
    """
    check_activation(activation)
    z = np.asarray(z, dtype=np.float64)
    values, _ = activation_values(ACTIVATION_CODES[activation], np.ascontiguousarray(z.ravel()))
    return values.reshape(z.shape)
