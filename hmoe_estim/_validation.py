"""The one validation layer of the package: checks of scalar arguments, of the names of gate
positions and activations, of the Voronoi loss's ``r`` and of ``token_matching``.

Each check returns the value (normalised) or raises a ``ValueError`` that names the argument
and the accepted values; the study configuration wraps them with the key path.
"""

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


def check_gate(gate):
    """Return ``gate`` if it names a gate position, else raise a ``ValueError``."""
    from ._names import GATE_CODES, GATES

    if not isinstance(gate, str) or gate not in GATE_CODES:
        raise ValueError(
            f"Unknown gate {gate!r}. Use one of {list(GATES)}: 'none' (plain multi-head "
            "attention, linear experts), 'value' (G2, after the value projection), 'sdpa' "
            "(G1, after the attention output) or 'output' (G5, after the dense output)."
        )
    return gate


def check_activation(activation):
    """Return ``activation`` if it names a supported activation, else raise ``ValueError``."""
    from ._names import ACTIVATION_CODES, ACTIVATIONS

    if not isinstance(activation, str) or activation not in ACTIVATION_CODES:
        raise ValueError(
            f"Unknown activation {activation!r}. Use one of {list(ACTIVATIONS)}."
        )
    return activation


#: Accepted values of ``token_matching`` (the metrics' matching of tokens inside a pair).
TOKEN_MATCHING = ("auto", "enumerate", "hungarian")


def check_token_matching(token_matching):
    """Return ``token_matching`` if it is one of :data:`TOKEN_MATCHING`, else raise."""
    if not isinstance(token_matching, str) or token_matching not in TOKEN_MATCHING:
        raise ValueError(
            f"Unknown token_matching {token_matching!r}; use 'auto', 'enumerate' or 'hungarian'."
        )
    return token_matching


def check_r(r):
    """The exponent ``r`` of the Voronoi loss ``L_{1,r}``: an integer >= 1, or None (``L_2``)."""
    if r is None:
        return None
    if isinstance(r, (bool, np.bool_)) or not isinstance(r, numbers.Real) \
            or not float(r).is_integer() or r < 1:
        raise ValueError(
            f"r must be an integer >= 1 (L_{{1,r}} of the paper) or None (L_2); got {r!r}."
        )
    return int(r)
