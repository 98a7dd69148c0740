"""Local solvers of the least-squares objective and the multi-start search around them."""

from ._multistart import StartResult, run_starts

__all__ = ["StartResult", "run_starts"]
