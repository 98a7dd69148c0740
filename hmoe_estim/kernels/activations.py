"""Activations ``φ`` and their derivatives, as Numba kernels on blocks of values.

Codes follow :data:`hmoe_estim._names.ACTIVATION_CODES`: 0 sigmoid, 1 tanh, 2 gelu (exact,
with ``erf``), 3 silu. The branch on the code is taken once per block so that the loop over
the block stays tight; sigmoid and silu use the vectorisable :func:`~.vexp.exp_block`.
Every formula is stable for any finite input (no overflow to inf/NaN): with
``e = exp(-|z|) <= 1``, ``σ(z) = 1/(1+e)`` for ``z >= 0`` and ``e/(1+e)`` otherwise, and
``σ'(z) = e/(1+e)²`` for both signs.
"""

import math

import numpy as np
from numba import njit

from .vexp import exp_block

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=True)
def activation_block(code, z, phi, dphi, work, b):
    """Fill ``phi[:b] = φ(z[:b])`` and ``dphi[:b] = φ'(z[:b])``; ``work`` is scratch (>= b)."""
    if code == 0 or code == 3:  # sigmoid, silu
        for t in range(b):
            phi[t] = -abs(z[t])
        exp_block(phi, dphi, work, b)  # dphi = e = exp(-|z|)
        if code == 0:
            for t in range(b):
                e = dphi[t]
                r = 1.0 / (1.0 + e)
                phi[t] = r if z[t] >= 0 else e * r
                dphi[t] = e * r * r
        else:
            for t in range(b):
                e = dphi[t]
                zt = z[t]
                r = 1.0 / (1.0 + e)
                pos = zt >= 0
                sig = r if pos else e * r
                sig_neg = e * r if pos else r  # σ(-z) = 1 - σ(z), without cancellation
                phi[t] = zt * sig
                dphi[t] = sig * (1.0 + zt * sig_neg)
    elif code == 1:  # tanh
        for t in range(b):
            th = math.tanh(z[t])
            phi[t] = th
            dphi[t] = 1.0 - th * th
    else:  # gelu: z Φ(z)
        for t in range(b):
            zt = z[t]
            cdf = 0.5 * (1.0 + math.erf(zt * _INV_SQRT2))
            phi[t] = zt * cdf
            dphi[t] = cdf + zt * _INV_SQRT2PI * math.exp(-0.5 * zt * zt)


@njit(cache=True)
def activation_values(code, z):
    """``(φ(z), φ'(z))`` for a 1-D array ``z``."""
    n = z.shape[0]
    phi = np.empty(n)
    dphi = np.empty(n)
    activation_block(code, z, phi, dphi, np.empty(n), n)
    return phi, dphi
