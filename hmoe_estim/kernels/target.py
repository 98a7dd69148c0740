"""Let LLVM use the full vector width of the machine inside the kernels.

On processors with AVX-512, LLVM's default tuning (``prefer-256-bit``) vectorises loops with
256-bit registers, four float64 lanes: wider vectors used to lower the clock of early AVX-512
parts. The kernels are bound by ``exp`` and division in loops over blocks of samples, where
eight lanes pay (timings: the documentation's performance page). Numba has no
per-function option for this; :func:`wide_vectors`, called first thing in a kernel, adds
LLVM's function attribute ``"prefer-vector-width"="512"`` (the one ``clang
-mprefer-vector-width=512`` sets) to the function being compiled. Other Numba code in the
process keeps the default tuning. On processors without AVX-512 the attribute changes
nothing: LLVM caps it at the widest registers there are.

The attribute is added to llvmlite's attribute set of the function directly, because
llvmlite's ``add`` only accepts the attributes it knows by name. If a future llvmlite changes
that structure, the kernels compile as before, with the default width.
"""

import gc
from contextlib import contextmanager

import numba

_ATTRIBUTE = '"prefer-vector-width"="512"'

#: ``fastmath`` flags of the kernels that sum over samples: re-association (vectorised sums) and
#: fused multiply-add. Never ``nnan``/``ninf``: NaN and inf must propagate. The order-sensitive
#: ``exp`` and activation kernels use ``{"contract"}`` alone.
FASTMATH = {"reassoc", "contract"}

#: Options of the functions only compiled code calls (the block passes and their row helpers):
#: no CPython or C wrapper is generated for them, which shortens the first compilation.
INTERNAL = {"no_cpython_wrapper": True, "no_cfunc_wrapper": True}

if numba.config.DISABLE_JIT:

    def wide_vectors():
        """No-op when the kernels run as Python."""

else:
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def wide_vectors(typingctx):
        """Mark the calling kernel for full-width vectorisation (see the module docstring).

        An intrinsic, called straight from the kernels: a jitted wrapper would be inlined by
        Numba into every kernel, an extra pass over each one's IR on a cold start.
        """

        def codegen(context, builder, signature, args):
            try:
                set.add(builder.function.attributes, _ATTRIBUTE)
            except Exception:  # pragma: no cover - llvmlite internals changed
                pass
            return context.get_dummy_value()

        return types.none(), codegen


@contextmanager
def collector_paused():
    """Pause Python's cyclic garbage collector while Numba compiles a kernel.

    Compiling creates millions of short-lived objects; the collector's full passes over the
    whole heap (numpy, SciPy, scikit-learn and Numba's own objects) took about 0.9 s of a
    9 s cold first fit. The collector is re-enabled on exit (if it was enabled), so the
    compiler's cyclic garbage is collected afterwards; the peak memory of a cold compile is
    about 50 MB higher. Nested uses, and a collector the caller disabled, are left alone.
    """
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
