"""The flat parameter vector ``theta`` that the kernels and L-BFGS-B work on.

Layout, for shape ``(H, N, K, D)`` and ``T = D (D + 1) / 2``::

    theta = [ omega (H*K) | M upper triangles (H*(N-1)*T) | a (H*N*K*D) ]

Only ``M[h, i]`` for ``i < N-1`` is free: ``M[h, N-1] = 0`` is the softmax translation gauge
of assumption (A.3). The triangle of ``M[h, i]`` holds ``M[p, q]`` for ``p <= q`` in row-major
order, so ``xᵀ M x = Σ_{p<=q} c_pq M[p,q] x_p x_q`` with ``c_pq = 1`` on the diagonal and 2 off it.
"""

import numpy as np

from ..kernels import offsets
from ._measure import MixingMeasure

__all__ = ["n_params", "pack", "unpack", "triangle_indices", "make_bounds"]


def triangle_indices(D):
    """Row and column indices ``(p, q)``, ``p <= q``, of the upper triangle, row-major."""
    return np.triu_indices(D)


def n_params(H, N, K, D):
    """Number of free parameters of an (H, K, N)-HMoE on ``R^D``."""
    return offsets(H, N, K, D)[3]


def pack(measure):
    """Flatten a :class:`MixingMeasure` into ``theta`` (after normalising ``M[h, N-1] = 0``)."""
    G = measure.normalized()
    H, N, K, D = G.shape
    p, q = triangle_indices(D)
    tri = G.M[:, : N - 1][..., p, q]  # (H, N-1, T)
    return np.concatenate([G.omega.ravel(), tri.ravel(), G.a.ravel()])


def unpack(theta, shape):
    """Inverse of :func:`pack`: a :class:`MixingMeasure` from ``theta``."""
    H, N, K, D = shape
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape != (n_params(H, N, K, D),):
        raise ValueError(
            f"theta has shape {theta.shape}; shape {shape} needs ({n_params(H, N, K, D)},)."
        )
    T, o1, o2, _ = offsets(H, N, K, D)
    omega = theta[:o1].reshape(H, K)
    tri = theta[o1:o2].reshape(H, N - 1, T)
    a = theta[o2:].reshape(H, N, K, D)
    M = np.zeros((H, N, D, D))
    p, q = triangle_indices(D)
    M[:, : N - 1, p, q] = tri
    M[:, : N - 1, q, p] = tri
    return MixingMeasure(omega.copy(), M, a.copy())


def make_bounds(shape, *, omega_max, param_bound, positive_weights=True):
    """L-BFGS-B bounds of the compact parameter space (A.1), ``0 <= omega <= omega_max``.

    ``param_bound`` bounds every entry of ``M`` and ``a`` in absolute value. With
    ``positive_weights=False`` the weights are signed, ``-omega_max <= omega <= omega_max``
    (as an attention layer's ``W_O``; assumption (A.2) dropped).
    """
    H, N, K, D = shape
    n_omega = H * K
    n_rest = n_params(H, N, K, D) - n_omega
    omega_low = np.zeros(n_omega) if positive_weights else np.full(n_omega, -omega_max)
    lower = np.concatenate([omega_low, np.full(n_rest, -param_bound)])
    upper = np.concatenate([np.full(n_omega, omega_max), np.full(n_rest, param_bound)])
    return lower, upper
