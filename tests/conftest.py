"""Test set-up shared by every test module."""

import os

import pytest

# scikit-learn's array-API conformance check (run by parametrize_with_checks) needs SciPy's
# array-API mode, which must be chosen before SciPy is first imported.
os.environ.setdefault("SCIPY_ARRAY_API", "1")


@pytest.fixture(autouse=True, scope="session")
def _solve_results_have_a_status_of_the_table():
    """Every :class:`~hmoe_estim.solvers.SolveResult` made in the test process — by either
    local solver, in any test — has an integer ``status`` that is a key of
    :data:`~hmoe_estim.solvers.MESSAGES` (``converged`` is ``status > 0`` by definition).
    Starts run in joblib workers are not seen here; ``tests/test_search.py`` covers the
    statuses one by one."""
    from hmoe_estim.solvers import _result

    cls = _result.SolveResult
    init = cls.__init__

    def checked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        assert isinstance(self.status, int) and self.status in _result.MESSAGES, (
            f"SolveResult status {self.status!r} is not a key of MESSAGES ({self.message!r})")

    cls.__init__ = checked
    try:
        yield
    finally:
        cls.__init__ = init
