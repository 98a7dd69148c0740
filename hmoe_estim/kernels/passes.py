"""The two kernel passes of a Levenberg–Marquardt iteration, set up once per data set.

:class:`KernelPasses` calls the compiled pass of :mod:`.jacobian` (the Gauss–Newton sums
``JᵀJ``, ``Jᵀr``, ``Σ r²``) and its forward pass (the prediction) without the per-call set-up
of the public wrappers; the solvers (``solvers/_lm.py``) use it through
:meth:`hmoe_estim.solvers.Problem.passes`.
"""

import math
from functools import partial as partial_call

import numpy as np

from .jacobian import _entry, _jchunks, basis_map, expand_basis, sums_layout, sums_width
from .lm_step import LMWorkspace
from .objective import GATE_NONE, GATE_OUTPUT, _chunks, chunk_total, kernel_threads, mixed_values

__all__ = ["KernelPasses"]


class KernelPasses:
    """The two kernel passes of the iterations, set up once for the starts on one data set.

    ``sums(theta, offset)`` returns what
    :func:`~hmoe_estim.kernels.jacobian.gauss_newton_sums` returns, followed by whether
    ``JᵀJ``, ``Jᵀr`` and ``Σ r²`` are all finite; ``values(theta)`` returns what
    :func:`~hmoe_estim.kernels.objective.predict` returns, in a buffer that the next call
    overwrites. Both run the compiled pass of those functions with the same arguments and
    chunks, added in the same order — the same bits — but skip their per-call set-up (entry
    point, layout, buffers, thread count, array checks), which on the race's subsamples of a
    linear gate (1024 samples) cost a quarter of the kernel time. The thread count is read
    here once: the caller keeps it fixed while the starts run. ``theta`` must be a
    C-contiguous float64 array that is not modified afterwards: the mixed values
    ``b = Σ_k ω_k a_k`` of the linear gates are kept from one call to the next with the same
    ``theta`` object (a trial point's forward pass, then its sums once accepted).
    """

    def __init__(self, XT, y, shape, g_code, a_code):
        H, N, K, D = (int(v) for v in shape)
        XT = np.ascontiguousarray(XT, dtype=np.float64)
        yc = np.ascontiguousarray(y, dtype=np.float64)
        n = XT.shape[1]
        # rows summed (J's, or the basis J̃ of a linear gate), spread and expanded after
        P, sym, scale, basis = sums_layout(H, N, K, D, g_code)
        ntri = P * (P + 1) // 2
        width = sums_width(H, N, K, D, g_code)  # per chunk: [J̃ᵀJ̃ upper | J̃ᵀr | Σr² | ΣJ̃ | Σr]
        partial = np.zeros((_jchunks(n, width)[1], width))
        no_sums = np.zeros((_chunks(n)[1], 0))  # a forward pass: the chunks only split the work
        out = np.empty(n)
        zeros = np.zeros(ntri + P + 1)
        empty = np.zeros(0)
        self.n, self.shape = n, (H, N, K, D)
        self.penalty_weights = None
        # rounding level of Σ r²: residuals of a few ulp of the targets (module docstring)
        nm = n if n > 0 else 1
        self.floor = nm * (1e-13 * (float(np.sqrt(np.mean(y ** 2))) if n > 0 else 0.0)) ** 2
        nthreads = kernel_threads(n)
        entry = _entry(nthreads > 1, g_code, a_code)
        if nthreads <= 1:
            run = partial_call(entry, 0, 1)
        else:
            def run(*args):
                return entry(*args, nthreads)
        linear = g_code == GATE_NONE or g_code == GATE_OUTPUT
        last = [None, empty]  # the theta of the last call and its mixed values

        def mixed(theta):
            if not linear:
                return empty  # what mixed_values returns for the other gates
            if theta is not last[0]:
                last[0], last[1] = theta, mixed_values(theta, H, N, K, D, g_code)
            return last[1]

        def values(theta):
            run(theta, XT, empty, 0.0, mixed(theta), H, N, K, g_code, a_code, no_sums, out,
                False)
            return out

        def sums(theta, offset):
            run(theta, XT, yc, float(offset), mixed(theta), H, N, K, g_code, a_code, partial,
                empty, True)
            total = chunk_total(partial)
            # JᵀJ, Jᵀr and Σr² all finite iff Σ_p total_p · 0 is: a finite entry gives ±0,
            # an infinite or NaN one NaN (one dot product instead of isfinite(...).all())
            finite = math.isfinite(total[:ntri + P + 1].dot(zeros))
            JtJ, Jtr, colsum = (total[sym] * scale, total[ntri:ntri + P],
                                total[ntri + P + 1:ntri + 2 * P + 1])
            if basis:  # J = J̃ L (jacobian.summed_rows)
                JtJ, Jtr, colsum = expand_basis(JtJ, Jtr, colsum, *basis_map(theta, H, N, K, D))
                finite = finite and math.isfinite(JtJ.sum() + Jtr.sum())  # NaN/inf reach a sum
            return (JtJ, Jtr, float(total[ntri + P]), colsum, float(total[ntri + 2 * P + 1]),
                    finite)

        self.values, self.sums = values, sums
        #: scratch arrays of the iterations: ``workspace(P)`` (:class:`~.lm_step.LMWorkspace`)
        self.workspace = LMWorkspace()

