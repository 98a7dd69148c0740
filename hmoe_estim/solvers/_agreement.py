"""Agreement between finished starts: how many reached the best objective.

Plain NumPy (no Numba): a study's summary counts agreement from stored objectives.
"""

import numpy as np

__all__ = ["AGREE_TOL", "count_agreeing"]

#: Starts within ``AGREE_TOL · σ̂²/n`` of the best objective count as agreeing with it.
AGREE_TOL = 1.0


def count_agreeing(objectives, n_samples, agree_tol=AGREE_TOL, floor=0.0):
    """Starts whose objective is within ``agree_tol · best / n`` of the best one, or at most
    ``floor`` (the rounding level of a noiseless fit, where ``best / n`` is no unit).

    The objective is the mean squared residual; at the optimum it estimates ``σ²``, so
    ``best / n`` is the natural unit ``σ̂²/n`` of differences between objectives (the gap
    between the truth's objective and the least-squares optimum is a few of these units).
    ``n_samples`` is the number of residuals.
    """
    obj = np.asarray(objectives, dtype=float)
    finite = obj[np.isfinite(obj)]
    if finite.size == 0:
        return 0
    best = float(finite.min())
    bound = best + agree_tol * max(best, 0.0) / max(int(n_samples), 1)
    return int(np.sum(finite <= max(bound, float(floor))))
