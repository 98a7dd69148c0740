"""Offsets of the blocks of the packed parameter vector ``theta`` (one definition).

Layout, for shape ``(H, N, K, D)`` and ``T = D (D + 1) / 2`` (docs: Theory to code,
"The parameter vector")::

    theta = [ omega (H*K) | M upper triangles (H*(N-1)*T) | a (H*N*K*D) ]

:func:`theta_offsets` is compiled for the kernels and called as plain Python
(:data:`offsets`) by the model, the solvers and the metrics, so the arithmetic is written once.
"""

from numba import njit

__all__ = ["theta_offsets", "offsets"]


@njit(cache=True)
def theta_offsets(H, N, K, D):
    """``(T, o1, o2, P)``: triangle size, offsets of ``M`` and ``a`` in ``theta``, its length."""
    T = D * (D + 1) // 2
    o1 = H * K
    o2 = o1 + H * (N - 1) * T
    return T, o1, o2, o2 + H * N * K * D


#: :func:`theta_offsets` as plain Python (no compilation, no dispatch); the function itself
#: when the JIT is disabled.
offsets = getattr(theta_offsets, "py_func", theta_offsets)
