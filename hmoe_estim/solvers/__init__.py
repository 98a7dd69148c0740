"""Local solvers of the least-squares objective (eq. (3)) and the global search around them.

One shape for a fit (documentation: the solver page):

- :class:`Problem` — the data, the parameter layout, the box, the gate, the options;
- local solvers behind one interface, :class:`LocalSolver`: :class:`LevenbergMarquardt`
  (the default) and :class:`LBFGSB`; both end a start with a :class:`SolveResult` whose
  ``status`` is a key of one message table, :data:`MESSAGES`;
- :class:`Search` — the race, the moves (:class:`HeadRestarts`, :class:`ExpertReassignment`,
  :class:`SoftModes`), the rounds and the agreement check; every ``"auto"`` resolved from one
  table (``solvers/_schedule.py``).

Names are loaded on first use (PEP 562): ``count_agreeing`` needs NumPy only.
"""

from .._lazy import attach

#: public name -> module of this package that defines it
_LAZY = {
    "Problem": "_problem",
    "has_sign_symmetry": "_problem",
    "subsample_indices": "_problem",
    "SolveResult": "_result",
    "MESSAGES": "_result",
    "LocalSolver": "_local",
    "LevenbergMarquardt": "_local",
    "LBFGSB": "_local",
    "Search": "_search",
    "SearchResult": "_search",
    "make_search": "_search",
    "Schedule": "_schedule",
    "Move": "_moves",
    "HeadRestarts": "_moves",
    "ExpertReassignment": "_moves",
    "SoftModes": "_moves",
    "count_agreeing": "_agreement",
    "AGREE_TOL": "_agreement",
    "STAT_TOL": "_lm",
    "levenberg_marquardt": "_lm",
}

__getattr__, __dir__, __all__ = attach(__name__, _LAZY)
