"""Building a :class:`~hmoe_estim.solvers.Problem` and its random starts in the tests, on the
data as given (the estimator scales its data first; these tests work on the raw data).

``make_problem`` gives the box of (A.1) from :func:`~hmoe_estim.model.make_bounds` (and an
unbounded intercept last with ``fit_intercept``), ``make_draw`` a ``draw()`` of packed random
starts in that box, as the search asks for them.
"""

import numpy as np

from hmoe_estim.model import make_bounds
from hmoe_estim.model._starts import random_start_theta
from hmoe_estim.solvers import Problem


def make_problem(X, y, shape, gate, activation="sigmoid", *, omega_max=10.0, param_bound=10.0,
                 positive_weights=True, fit_intercept=False, alpha=0.0, transposed=False):
    """The least-squares problem on ``X`` (of shape (n, D); (D, n) when ``transposed``) and
    ``y``."""
    XT = np.require(X if transposed else np.asarray(X).T, dtype=np.float64,
                    requirements=["C", "W"])
    y = np.require(y, dtype=np.float64, requirements=["C", "W"])
    lower, upper = make_bounds(shape, omega_max=omega_max, param_bound=param_bound,
                               positive_weights=positive_weights)
    if fit_intercept:
        lower, upper = np.append(lower, -np.inf), np.append(upper, np.inf)
    return Problem(XT, y, shape, gate, activation, lower, upper, fit_intercept=fit_intercept,
                   alpha=alpha)


def make_draw(problem, seed=0, **kw):
    """``draw()``: a packed random start (:func:`random_start_theta`) clipped to the box of
    ``problem`` (an intercept starts at 0)."""
    rng = np.random.RandomState(seed)
    tail = np.zeros(int(problem.fit_intercept))

    def draw():
        t = random_start_theta(problem.shape, rng, **kw)
        return np.clip(np.concatenate([t, tail]), problem.lower, problem.upper)

    return draw


def schedule_of(gate, n_heads=1, activation="sigmoid", *, n_tokens=2, n_experts=1,
                n_starts=4, **search):
    """The resolved :class:`~hmoe_estim.solvers.Schedule` of ``Search(n_starts=n_starts,
    **search)`` on a problem of the given model (the schedule reads the model, not the
    data)."""
    from hmoe_estim.solvers import Search

    shape = (n_heads, n_tokens, n_experts, 2)
    problem = make_problem(np.zeros((8, 2)), np.zeros(8), shape, gate, activation)
    return Search(n_starts=n_starts, **search).schedule(problem)
