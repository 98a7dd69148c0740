"""Activations ``φ`` and their derivatives, as Numba kernels on blocks of values.

Codes follow :data:`hmoe_estim._names.ACTIVATION_CODES`: 0 sigmoid, 1 tanh, 2 gelu (exact,
with ``erf``), 3 silu. The branch on the code is taken once per block so that the loop over
the block stays tight. Every formula is stable for any finite input (no overflow to inf/NaN).
"""

import math

import numpy as np
from numba import njit

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=True, inline="always")
def _sigmoid(z):
    # exp(-|z|) never overflows, and the branch keeps full relative accuracy in both tails.
    e = math.exp(-abs(z))
    r = 1.0 / (1.0 + e)
    return r if z >= 0 else e * r


@njit(cache=True)
def activation_block(code, z, phi, dphi, b):
    """Fill ``phi[:b] = φ(z[:b])`` and ``dphi[:b] = φ'(z[:b])``."""
    if code == 0:  # sigmoid
        for t in range(b):
            s = _sigmoid(z[t])
            phi[t] = s
            dphi[t] = s * (1.0 - s)
    elif code == 1:  # tanh
        for t in range(b):
            th = math.tanh(z[t])
            phi[t] = th
            dphi[t] = 1.0 - th * th
    elif code == 2:  # gelu: z Φ(z)
        for t in range(b):
            zt = z[t]
            cdf = 0.5 * (1.0 + math.erf(zt * _INV_SQRT2))
            phi[t] = zt * cdf
            dphi[t] = cdf + zt * _INV_SQRT2PI * math.exp(-0.5 * zt * zt)
    else:  # silu: z σ(z)
        for t in range(b):
            zt = z[t]
            s = _sigmoid(zt)
            phi[t] = zt * s
            dphi[t] = s * (1.0 + zt * (1.0 - s))


@njit(cache=True)
def activation_values(code, z):
    """``(φ(z), φ'(z))`` for a 1-D array ``z``."""
    n = z.shape[0]
    phi = np.empty(n)
    dphi = np.empty(n)
    activation_block(code, z, phi, dphi, n)
    return phi, dphi
