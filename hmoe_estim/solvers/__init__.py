"""Local solvers of the least-squares objective (eq. (3)) and the global search around them.

``_gauss_newton`` — bounded Levenberg–Marquardt on the fused ``JᵀJ`` / ``Jᵀr`` kernel
(``kernels/jacobian.py``); ``_multistart`` — L-BFGS-B from several starts; ``_search`` — the
racing of many random starts, the signed-weight search of sign-symmetric models, and
perturb-and-refit. See :doc:`/user_guide/solver` for what each strategy was measured to do.
"""

from ._gauss_newton import STAT_TOL, LMResult, levenberg_marquardt, run_lm_starts
from ._multistart import StartResult, run_starts
from ._search import count_agreeing, fold_signs, has_sign_symmetry, hop, race, signed_bounds

__all__ = [
    "StartResult",
    "run_starts",
    "LMResult",
    "levenberg_marquardt",
    "run_lm_starts",
    "STAT_TOL",
    "race",
    "hop",
    "has_sign_symmetry",
    "fold_signs",
    "signed_bounds",
    "count_agreeing",
]
