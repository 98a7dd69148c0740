"""BLAS from compiled kernels: ``A += Jᵀ J`` on a block of Jacobian rows by ``dsyrk``.

A block of ``m`` rows of a C-ordered Jacobian ``J`` (``m × P``) is, to Fortran's BLAS, the
column-major ``P × m`` matrix ``Jᵀ``; ``dsyrk('L', 'N', P, m, 1, Jᵀ, P, 1, A, P)`` adds
``Jᵀ J`` to the lower triangle of a column-major ``A``, which is the upper triangle of the
C-ordered ``A`` the kernels keep. The routine is SciPy's (``scipy.linalg.cython_blas``, the
BLAS NumPy and SciPy already load), bound as an external symbol so that the kernels that call
it stay cacheable (``cache=True``). One block is computed by one BLAS call, whose order of
operations depends only on its sizes: the sums stay the same bits for any number of Numba
threads. Callers run it with BLAS on one thread (``threads.single_thread_blas``): BLAS threads
started inside Numba's workers only compete with them for the cores.
"""

import llvmlite.binding as llvm
import numpy as np
from numba import config, njit, types
from numba.extending import get_cython_function_address

__all__ = ["syrk_upper", "SyrkArgs"]

_SYMBOL = "hmoe_estim_dsyrk"
llvm.add_symbol(_SYMBOL, get_cython_function_address("scipy.linalg.cython_blas", "dsyrk"))
_p = types.voidptr
_dsyrk = types.ExternalFunction(_SYMBOL, types.void(_p, _p, _p, _p, _p, _p, _p, _p, _p, _p))

_L, _N = ord("L"), ord("N")


@njit(cache=True)
def SyrkArgs():
    """Scratch for :func:`syrk_upper`'s by-reference arguments (one per thread):
    ``(ints, doubles, chars)``."""
    chars = np.empty(2, dtype=np.uint8)
    chars[0] = _L
    chars[1] = _N
    return np.zeros(3, dtype=np.int32), np.ones(2), chars


@njit(cache=True)
def syrk_upper(A, J, m, ints, dbl, chars):
    """``A[p, q] += Σ_{k<m} J[k, p] J[k, q]`` for ``q >= p`` (``A``: C-ordered ``P × P``;
    ``J``: C-ordered with ``P`` columns, its first ``m`` rows used; the lower triangle of
    ``A`` is left as it is). ``ints, dbl, chars`` from :func:`SyrkArgs`."""
    P = J.shape[1]
    if m <= 0 or P == 0:
        return
    ints[0] = P
    ints[1] = m
    ints[2] = P
    dbl[0] = 1.0
    dbl[1] = 1.0
    _dsyrk(chars[0:].ctypes.data, chars[1:].ctypes.data, ints[0:].ctypes.data,
           ints[1:].ctypes.data, dbl[0:].ctypes.data, J.ctypes.data, ints[2:].ctypes.data,
           dbl[1:].ctypes.data, A.ctypes.data, ints[2:].ctypes.data)


if config.DISABLE_JIT:  # interpreted kernels (NUMBA_DISABLE_JIT=1): the same sum in NumPy

    def syrk_upper(A, J, m, ints, dbl, chars):  # noqa: F811
        """:func:`syrk_upper` without the compiler (tests of the interpreted kernels)."""
        Jm = J[:m]
        A += np.triu(Jm.T @ Jm)
