"""After a fit: say when the model cannot follow the target (training R² below 0).

The paper's least-squares model (eq. (3)) has no intercept, and under assumption (A.2)
(``omega >= 0``) a gated model's output has the sign of ``φ``: with the sigmoid, G1 (eq. (12))
and G2 (eq. (9)) are positive everywhere. On real data (a target with mean 152, say) such a
model fits worse than the constant mean, and without a word the user only sees a negative
cross-validated R². :func:`diagnose_fit` computes the training ``R² = 1 − SSE/SST`` and, when it
is below 0, warns once with :class:`PoorFitWarning`, naming every cause that applies and the
knob that removes it.
"""

import warnings

import numpy as np

__all__ = ["PoorFitWarning", "diagnose_fit", "SAMPLES_PER_PARAMETER"]

#: Fewer samples than this per free parameter is named as a cause of a poor fit.
SAMPLES_PER_PARAMETER = 10

#: Lower bound of ``φ`` for the activations that are bounded below (sigmoid: 0).
_PHI_MIN = {"sigmoid": 0.0, "gelu": -0.17, "silu": -0.28}


class PoorFitWarning(UserWarning):
    """The fitted model predicts the training targets worse than their mean (R² < 0), or the
    target is constant (R² undefined)."""


def _causes(est, y, n_params):
    """Human-readable causes (with the knob) of a training R² below 0."""
    out = []
    gate, act = est.gate, est.activation
    if not est.fit_intercept and abs(float(np.mean(y))) > 0.1 * float(np.std(y)):
        out.append(
            f"no intercept: the target's mean is {np.mean(y):.4g} and the model (eq. (3)) has "
            "no constant term; set fit_intercept=True (or centre y, e.g. with "
            "TransformedTargetRegressor(transformer=StandardScaler()))"
        )
    if gate in ("value", "sdpa") and est.positive_weights and act in _PHI_MIN:
        kind = "positive" if act == "sigmoid" else "bounded below"
        out.append(
            f"{kind} output: with omega >= 0 the {gate}-gated model with φ = {act} only "
            f"takes values Σω·φ, φ >= {_PHI_MIN[act]}; set positive_weights=False (signed "
            "weights, as an attention layer's W_O) and/or fit_intercept=True"
        )
    if gate == "output":
        out.append(
            f"bounded output: the output gate returns φ(f_MHA) with φ = {act}; scale the target "
            "into φ's range with TransformedTargetRegressor, or use another gate"
        )
    n = len(y)
    if n < SAMPLES_PER_PARAMETER * n_params:
        out.append(
            f"too few samples per parameter: {n} samples for {n_params} free parameters "
            f"({n / n_params:.2g} per parameter); use more data or fewer heads/tokens/channels"
        )
    if not out:
        out.append(
            "the optimiser may have stopped far from the least-squares optimum or the target's "
            "scale does not suit the parameter box; try more n_starts or max_iter, and "
            "standardise the target with TransformedTargetRegressor"
        )
    return out


def diagnose_fit(est, y, y_pred, n_params, *, stacklevel=3):
    """Warn once (:class:`PoorFitWarning`) when the training R² is below 0 or undefined.

    Parameters
    ----------
    est : HMoERegressor
        The fitted estimator (its ``gate``, ``activation``, ``fit_intercept``,
        ``positive_weights`` name the causes).
    y, y_pred : ndarray of shape (n,)
        Training targets and the fitted model's predictions on the training inputs.
    n_params : int
        Number of free parameters (intercept included).

    Returns
    -------
    float
        The training ``R² = 1 − Σ(y − ŷ)² / Σ(y − ȳ)²``; NaN for a constant target (then the
        warning says so instead).
    """
    if np.ptp(y) == 0:
        warnings.warn(
            "The target is constant: R² is undefined and the fit only matches that constant. "
            "Check that y is the intended column.",
            PoorFitWarning,
            stacklevel=stacklevel,
        )
        return float("nan")
    resid = float(np.sum((y - y_pred) ** 2))
    total = float(np.sum((y - np.mean(y)) ** 2))
    r2 = 1.0 - resid / total
    if r2 < 0:
        causes = _causes(est, y, n_params)
        warnings.warn(
            f"The fitted model predicts its own training targets worse than their mean "
            f"(training R² = {r2:.3g}). Cause{'s' if len(causes) > 1 else ''}: "
            + "; ".join(causes) + ".",
            PoorFitWarning,
            stacklevel=stacklevel,
        )
    return r2
