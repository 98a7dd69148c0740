"""Thread contexts of the kernels: Numba's thread count and the BLAS thread limit.

The one place that sets Numba's (process-wide) thread count and restores it
(:func:`numba_threads`), and that limits the BLAS to one thread while the solvers factorise
their small ``P × P`` systems (:class:`single_thread_blas`).
"""

import sys
from contextlib import contextmanager

__all__ = ["numba_threads", "set_numba_threads", "single_thread_blas"]


def set_numba_threads(n):
    """Set Numba's thread count to ``n``, clipped to ``[1, NUMBA_NUM_THREADS]``; return the
    previous count. ``None`` leaves it as it is."""
    import numba

    previous = numba.get_num_threads()
    if n is not None:
        numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
    return previous


@contextmanager
def numba_threads(n):
    """Run the block with Numba's thread count ``n`` (``None``: unchanged); restore it after."""
    previous = set_numba_threads(n)
    try:
        yield
    finally:
        set_numba_threads(previous)


class single_thread_blas:
    """Limit the BLAS to one thread, once per batch of starts.

    The P × P factorisations are tiny; a multi-threaded BLAS would only spin threads that
    steal the cores of the Numba kernels. Nested uses are free. The thread-pool controller
    (a scan of the loaded libraries: ~3 ms, as much as the race of a small fit's
    iterations save elsewhere) is made once and made again only when modules were imported
    since, which may have loaded another BLAS.
    """

    _depth = 0
    _controller = None
    _n_modules = -1

    def __enter__(self):
        cls = single_thread_blas
        if cls._depth == 0:
            if cls._controller is None or cls._n_modules != len(sys.modules):
                from threadpoolctl import ThreadpoolController

                cls._controller = ThreadpoolController()
                cls._n_modules = len(sys.modules)
            self._ctx = cls._controller.limit(limits=1, user_api="blas")
        else:
            self._ctx = None
        cls._depth += 1
        return self

    def __exit__(self, *exc):
        single_thread_blas._depth -= 1
        if self._ctx is not None:
            self._ctx.unregister()
        return False
