"""Local solvers: one interface, two implementations.

A local solver runs starts to a local minimum of a :class:`~hmoe_estim.solvers.Problem`. Its
knobs live on the object (in the manner of skglm's solvers); its life cycle is
:meth:`LocalSolver.solve` (fresh starts) and :meth:`LocalSolver.resume` (starts continued from
earlier results, as the race does), both returning :class:`~hmoe_estim.solvers.SolveResult`
with a status code from one message table (``solvers/_result.py``).

- :class:`LevenbergMarquardt` — bounded Levenberg–Marquardt on the fused ``JᵀJ`` / ``Jᵀr``
  kernel (``solvers/_lm.py``), the default;
- :class:`LBFGSB` — SciPy's L-BFGS-B on the fused objective and gradient
  (``solvers/_lbfgsb.py``).
"""

from sklearn.base import BaseEstimator

from .._defaults import MAX_ITER, SOLVERS, TOL
from .._validation import check_count, check_positive
from ._lbfgsb import run_starts
from ._lm import STAT_TOL, run_lm_starts

__all__ = ["LocalSolver", "LevenbergMarquardt", "LBFGSB", "make_local_solver"]


class LocalSolver(BaseEstimator):
    """Base class of the local solvers (see the module docstring).

    Subclasses set ``name`` and implement ``_run``.
    """

    #: Short name (``"lm"``, ``"lbfgs"``), as the estimators' ``solver`` takes it.
    name = None

    def validate(self):
        """Raise a ``ValueError`` naming a knob out of its range; return ``self``."""
        check_count(self.max_iter, "max_iter", 1)
        check_positive(self.tol, "tol")
        return self

    @property
    def label(self):
        return SOLVERS[self.name]

    def solve(self, problem, starts, *, max_iter=None, n_jobs=None, verbose=0):
        """Run every start (packed ``theta`` arrays) to convergence, or ``max_iter``
        iterations (default: the solver's). Returns the results in start order."""
        return self._run(problem, list(starts), self._cap(max_iter), None, n_jobs, verbose)

    def resume(self, problem, results, *, max_iter=None, keep_counts=True, n_jobs=None,
               verbose=0):
        """Continue each of ``results`` (earlier :class:`SolveResult`) for at most
        ``max_iter`` more iterations. ``keep_counts``: the new results count the earlier
        passes too; otherwise only the iterations carry over."""
        return self._run(problem, list(results), self._cap(max_iter), bool(keep_counts),
                         n_jobs, verbose)

    def _cap(self, max_iter):
        return int(self.max_iter if max_iter is None else max_iter)

    def _run(self, problem, starts, max_iter, keep_counts, n_jobs, verbose):
        raise NotImplementedError


class LevenbergMarquardt(LocalSolver):
    """Bounded Levenberg–Marquardt (``solvers/_lm.py``; documentation: the solver page).

    Parameters
    ----------
    max_iter : int, default=1000
        Jacobian passes of each start.
    tol : float, default=1e-9
        Relative decrease of the objective below which a start has converged.
    stat_tol : float, default=0.01
        A start has also converged once a full Gauss–Newton step would lower the objective by
        less than ``stat_tol · σ̂²/n`` (a statistically irrelevant decrease).
    """

    name = "lm"

    def __init__(self, max_iter=MAX_ITER, tol=TOL, stat_tol=STAT_TOL):
        self.max_iter = max_iter
        self.tol = tol
        self.stat_tol = stat_tol

    def validate(self):
        super().validate()
        check_positive(self.stat_tol, "stat_tol")
        return self

    def _run(self, problem, starts, max_iter, keep_counts, n_jobs, verbose):
        kwargs = dict(max_iter=max_iter, tol=float(self.tol), stat_tol=float(self.stat_tol))
        if problem.fit_intercept:
            kwargs["fit_intercept"] = True
        if problem.alpha > 0:
            kwargs["alpha"] = problem.alpha
        if keep_counts is not None:  # resumed: the damping, and the counts asked for
            kwargs["mu0s"] = [r.damping for r in starts]
            kwargs["counts"] = [(r.n_jac, r.n_fev, r.n_iter) if keep_counts
                                else (0, 0, r.n_iter) for r in starts]
            starts = [r.theta for r in starts]
        return run_lm_starts(starts, problem, n_jobs=n_jobs, verbose=verbose, **kwargs)


class LBFGSB(LocalSolver):
    """SciPy's L-BFGS-B on the fused objective and gradient (``solvers/_lbfgsb.py``).

    Parameters
    ----------
    max_iter : int, default=1000
        Iterations of each start (gated fits need hundreds).
    tol : float, default=1e-9
        ``ftol`` and ``gtol`` of L-BFGS-B.
    """

    name = "lbfgs"

    def __init__(self, max_iter=MAX_ITER, tol=TOL):
        self.max_iter = max_iter
        self.tol = tol

    def _run(self, problem, starts, max_iter, keep_counts, n_jobs, verbose):
        counts = None
        if keep_counts is not None:  # L-BFGS-B keeps no state: restart from theta
            counts = [(r.n_passes if keep_counts else 0, r.n_iter) for r in starts]
            starts = [r.theta for r in starts]
        results = run_starts(starts, problem.XT, problem.y, problem.shape, problem.gate,
                             problem.activation, (problem.lower, problem.upper),
                             max_iter=max_iter, tol=float(self.tol), n_jobs=n_jobs,
                             verbose=verbose, fit_intercept=problem.fit_intercept,
                             alpha=problem.alpha)
        if counts is not None:
            for r, (passes, iters) in zip(results, counts):
                r.n_passes += passes
                r.n_iter += iters
        return results


#: ``solver`` names -> local solver classes.
LOCAL_SOLVERS = {"lm": LevenbergMarquardt, "lbfgs": LBFGSB}


def make_local_solver(solver, name="solver"):
    """A local solver from a name (``"lm"``, ``"lbfgs"``) or a :class:`LocalSolver`; a
    ``ValueError`` naming the valid choices otherwise."""
    if isinstance(solver, LocalSolver):
        return solver
    if isinstance(solver, str) and solver in LOCAL_SOLVERS:
        return LOCAL_SOLVERS[solver]()
    raise ValueError(
        f"Unknown {name} {solver!r}. Use 'lm' (bounded Levenberg-Marquardt), 'lbfgs' "
        "(L-BFGS-B), a LevenbergMarquardt or LBFGSB object, or a Search object (the "
        "estimators' solver)."
    )
