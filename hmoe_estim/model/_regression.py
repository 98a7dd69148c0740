"""The regression function ``f_G(x)`` of the four models (paper eq. (2), (9), (12))."""

import numpy as np

from .._names import ACTIVATION_CODES, GATE_CODES
from .._validation import check_activation, check_gate
from ..kernels import predict as _predict_kernel
from ._measure import MixingMeasure
from ._parameters import pack

__all__ = ["regression_function"]


def check_inputs(X, n_features, *, name="X"):
    """Validate a 2-D finite float array with ``n_features`` columns; return it as float64."""
    try:
        is_complex = np.iscomplexobj(X)
    except (TypeError, ValueError):
        is_complex = False
    if is_complex:
        raise ValueError(
            f"{name} must be real; got complex values. Pass the real part explicitly (the "
            "imaginary part would be dropped)."
        )
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array.") from exc
    if X.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D of shape (n_samples, n_features); got shape {X.shape}. "
            "Reshape a single sample with X.reshape(1, -1)."
        )
    if X.shape[1] != n_features:
        raise ValueError(
            f"{name} has {X.shape[1]} features but the measure has D = {n_features}."
        )
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or infinite values; remove or impute them.")
    return X


def evaluate(theta, X, shape, gate, activation):
    """``f_theta(X)`` from a packed ``theta``; raises if the result overflows."""
    H, N, K, D = shape
    XT = np.require(X.T, requirements=["C", "W"])  # one Numba specialisation, never read-only
    out = _predict_kernel(
        theta, XT, H, N, K, D, GATE_CODES[gate], ACTIVATION_CODES[activation]
    )
    if not np.all(np.isfinite(out)):
        raise ValueError(
            "The regression function overflowed (|x|² · |M| or a·x beyond the float64 "
            "range); rescale X to moderate values."
        )
    return out


def regression_function(measure, X, *, gate="none", activation="sigmoid"):
    """Evaluate ``f_G(x)`` for every row of ``X``.

    The four models (docs: Theory to code, "The regression model and the four regression
    functions"), with the token gate ``g[h, i](x) = softmax_i(xᵀ M[h, i] x)``,

    - ``gate="none"`` (MHA, paper eq. (2)): ``Σ_h Σ_k ω[h,k] Σ_i g[h,i](x) a[h,i,k]·x``;
    - ``gate="value"`` (G2, eq. (9)): ``Σ_h Σ_k ω[h,k] Σ_i g[h,i](x) φ(a[h,i,k]·x)``;
    - ``gate="sdpa"`` (G1, eq. (12)): ``Σ_h Σ_k ω[h,k] φ(Σ_i g[h,i](x) a[h,i,k]·x)``;
    - ``gate="output"`` (G5): ``φ(f_MHA(x))``.

    Parameters
    ----------
    measure : MixingMeasure
        The parameters ``G`` (signed ``omega`` allowed).
    X : array-like of shape (n_samples, D)
        Inputs.
    gate : {"none", "value", "sdpa", "output"}, default="none"
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
        The non-linearity ``φ`` (ignored for ``gate="none"``).

    Returns
    -------
    ndarray of shape (n_samples,)

    Raises
    ------
    ValueError
        Unknown gate or activation, ``X`` not 2-D, of another width than ``D``, or not finite.

    Examples
    --------
    >>> import numpy as np
    >>> from hmoe_estim import MixingMeasure, regression_function
    >>> G = MixingMeasure([[1.0]], np.zeros((1, 2, 2, 2)), np.ones((1, 2, 1, 2)))
    >>> regression_function(G, np.array([[1.0, 2.0]]))
    array([3.])
    """
    check_gate(gate)
    check_activation(activation)
    if not isinstance(measure, MixingMeasure):
        raise ValueError(
            f"measure must be a MixingMeasure; got {type(measure).__name__}. "
            "Build one with MixingMeasure(omega, M, a)."
        )
    X = check_inputs(X, measure.n_features)
    return evaluate(pack(measure), X, measure.shape, gate, activation)
