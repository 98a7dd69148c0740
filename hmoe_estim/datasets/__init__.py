"""Synthetic data from a known mixing measure: the regression model of the paper's eq. (1)."""

from ._generator import make_hmoe_regression, random_measure

__all__ = ["random_measure", "make_hmoe_regression"]
