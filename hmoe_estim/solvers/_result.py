"""What a local solve returns: one result type, a status code, one message table.

In the manner of SciPy's ``OptimizeResult`` and its ``TERMINATION_MESSAGES``: every local
solver (:class:`~hmoe_estim.solvers.LevenbergMarquardt`, :class:`~hmoe_estim.solvers.LBFGSB`)
ends a start with a :class:`SolveResult` whose ``status`` is a key of :data:`MESSAGES`.
A positive status has converged, ``0`` reached the iteration cap, a negative one failed.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["SolveResult", "MESSAGES", "message"]

#: status -> message (``str.format`` fields filled by the solver).
MESSAGES = {
    1: "the Gauss-Newton decrement is below tolerance",
    2: "stalled: decrease over {window} iterations below stat_tol per iteration",
    3: "the residuals are at rounding level",
    4: "every parameter is held at a bound",
    5: "no decrease measurable in floating point",
    6: "{detail}",  # L-BFGS-B converged: SciPy's message
    0: "reached max_iter={max_iter} {unit}",
    -1: "the objective is not finite at the start",
    -2: "the Jacobian is not finite at the start",
    -3: "the damping grew past 1e16 without a decrease",
    -4: "the Jacobian is not finite at the accepted point",
    -5: "{detail}",  # L-BFGS-B stopped abnormally: SciPy's message
}


def message(status, **fields):
    """The message of ``status``, its fields filled in."""
    return MESSAGES[status].format(**fields)


@dataclass
class SolveResult:
    """Outcome of one start of a local solver.

    ``theta``: the parameters (an intercept last when the problem fits one); ``objective``:
    the mean squared residual (plus the penalty), ``inf`` when not finite; ``n_iter``:
    iterations (Levenberg–Marquardt: Jacobian passes); ``status``, ``message``: see
    :data:`MESSAGES`; ``n_passes``: passes over the data (``n_jac + n_fev`` for
    Levenberg–Marquardt, objective+gradient evaluations for L-BFGS-B); ``damping``: the final
    damping ``μ`` (to resume a Levenberg–Marquardt start); ``offset``: the intercept.
    """

    theta: np.ndarray
    objective: float
    n_iter: int
    status: int
    message: str
    n_passes: int = 0
    n_jac: int = 0
    n_fev: int = 0
    damping: float = 1e-3
    offset: float = 0.0

    @property
    def converged(self):
        """Whether the start converged (``status > 0``)."""
        return self.status > 0
