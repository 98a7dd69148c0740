"""The package's default settings of a fit, in one place.

The estimators, the solver objects (:mod:`hmoe_estim.solvers`), the starting points and a
study's ``[fit]`` section all read their defaults from here. Plain constants, importable
without NumPy or Numba.
"""

#: The box of (A.1): every entry of ``M`` and ``a`` in ``[-PARAM_BOUND, PARAM_BOUND]`` ...
PARAM_BOUND = 10.0
#: ... and ``0 <= omega <= OMEGA_MAX`` (A.2).
OMEGA_MAX = 10.0
#: Starts run to convergence per search round; the best objective is kept.
N_STARTS = 4
#: Iteration cap of each start (Levenberg–Marquardt: Jacobian passes; L-BFGS-B: iterations).
MAX_ITER = 1000
#: Relative decrease of the objective below which a start has converged (L-BFGS-B: its
#: ``ftol`` and ``gtol``).
TOL = 1e-9
#: Default local solver (``"lm"``: Levenberg–Marquardt; ``"lbfgs"``: L-BFGS-B).
SOLVER = "lm"
#: Local solvers: name -> label in messages.
SOLVERS = {"lm": "Levenberg-Marquardt", "lbfgs": "L-BFGS-B"}
