"""Checks of scalar arguments shared by the estimators and the data generator."""

import numbers

import numpy as np


def check_count(value, name, minimum=1):
    """Return ``value`` as an int if it is an integer ``>= minimum``, else raise ``ValueError``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value}.")
    return int(value)


def check_positive(value, name, *, allow_zero=False):
    """Return ``value`` as a float if it is finite and ``> 0`` (``>= 0`` with ``allow_zero``)."""
    ok_type = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if not ok_type or not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}; got {value!r}.")
    return float(value)
