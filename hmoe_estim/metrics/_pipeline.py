"""The fitted measure of an estimator or a scikit-learn ``Pipeline``, in the coordinates of the
raw inputs (see :doc:`/user_guide/metrics`, "Scorers in pipelines").

A pipeline's last step fits its measure ``G' = (ω', M', a')`` on the transformed inputs
``x'``. When every step before it is a per-feature scaling ``x' = s ⊙ x`` (``S = diag(s)``),
the model sees ``x`` only through

- the gate's quadratic forms ``x'ᵀ M' x' = xᵀ (S M' S) x`` (one per head and token), and
- the experts' inner products ``a'·x' = (S a')·x``,

so ``G = (ω', S M' S, S a')`` has exactly the pipeline's regression function on raw ``x`` for
every gate (``φ`` acts on those scalars, ``ω`` is not touched). The estimator's
``intercept_`` is added outside every gate and is not part of the measure: it is unchanged.
``M[h, N-1] = 0`` (A.3) is kept. Any other step (centring, PCA, a non-linear or unknown
transformer) has no such measure, and is refused with a :class:`ValueError` naming it.
"""

import numpy as np
from sklearn.exceptions import NotFittedError

from ..model import MixingMeasure

__all__ = ["fitted_measure", "pipeline_scale", "final_estimator"]

#: How to fix a pipeline whose transformer has no exact map to raw coordinates.
_FIX = (
    "The theory metrics compare the fitted measure with a true measure in the raw coordinates, "
    "which is exact only through per-feature scalings (StandardScaler(with_mean=False), "
    "MaxAbsScaler, RobustScaler(with_centering=False), FunctionTransformer() or "
    "'passthrough'). Use StandardScaler(with_mean=False) (the estimator scales its inputs "
    "internally anyway), or score the final estimator (pipeline[-1]) against the true measure "
    "expressed in the transformed coordinates."
)


def _is_pipeline(estimator):
    return hasattr(estimator, "steps") and isinstance(getattr(estimator, "steps"), list)


def final_estimator(estimator):
    """The last step of a Pipeline (recursively), else the estimator itself."""
    while _is_pipeline(estimator) and estimator.steps:
        estimator = estimator.steps[-1][1]
    return estimator


def _flat_steps(estimator, prefix=""):
    """``[(qualified name, step)]`` of a pipeline, nested pipelines flattened."""
    out = []
    for name, step in estimator.steps:
        if _is_pipeline(step):
            out.extend(_flat_steps(step, prefix=f"{prefix}{name}__"))
        else:
            out.append((f"{prefix}{name}", step))
    return out


def _transformers(estimator):
    """``[(qualified name, transformer)]`` of every step before the final estimator."""
    return _flat_steps(estimator)[:-1] if _is_pipeline(estimator) else []


def _fitted_attr(step, name, attr):
    value = getattr(step, attr, None)
    if value is None:
        raise NotFittedError(
            f"step {name!r} ({type(step).__name__}) is not fitted (no {attr}): fit the whole "
            "pipeline before scoring it."
        )
    return np.asarray(value, dtype=np.float64)


def _step_scale(name, step):
    """``s`` with ``step(x) = s ⊙ x`` (``None`` for the identity), or ValueError."""
    from sklearn.preprocessing import (
        FunctionTransformer,
        MaxAbsScaler,
        RobustScaler,
        StandardScaler,
    )

    label = f"step {name!r} ({type(step).__name__})"
    if step is None or (isinstance(step, str) and step == "passthrough"):
        return None
    kind = type(step)
    if kind is FunctionTransformer:
        if step.func is None:
            return None
        raise ValueError(f"{label} applies {getattr(step.func, '__name__', step.func)!r}, which "
                         f"is not a per-feature scaling of x. {_FIX}")
    if kind is StandardScaler:
        if step.with_mean:
            raise ValueError(
                f"{label} centres the inputs (with_mean=True): the gate's quadratic form of "
                "x - mean is not a quadratic form of x, so the fitted measure has no exact "
                f"counterpart in raw coordinates. {_FIX}")
        if not step.with_std:
            return None
        return 1.0 / _fitted_attr(step, name, "scale_")
    if kind is MaxAbsScaler:
        return 1.0 / _fitted_attr(step, name, "scale_")
    if kind is RobustScaler:
        if step.with_centering:
            raise ValueError(
                f"{label} centres the inputs (with_centering=True): the fitted measure has no "
                f"exact counterpart in raw coordinates. {_FIX}")
        if not step.with_scaling:
            return None
        return 1.0 / _fitted_attr(step, name, "scale_")
    raise ValueError(
        f"{label} is not a per-feature scaling of x (centring, projections such as PCA, "
        f"non-linear or unknown transformers have no exact map of the measure). {_FIX}")


def pipeline_scale(estimator, n_features=None):
    """``s`` such that the final estimator of ``estimator`` sees ``x' = s ⊙ x``.

    Parameters
    ----------
    estimator : estimator or Pipeline
        A fitted estimator (``s`` is all ones) or a fitted :class:`~sklearn.pipeline.Pipeline`
        whose steps before the last are per-feature scalings.
    n_features : int, optional
        ``D``; the length of ``s`` when no step scales.

    Returns
    -------
    ndarray of shape (D,) or None
        ``None`` when every step is the identity.

    Raises
    ------
    ValueError
        A step that is not a per-feature scaling (centring, PCA, a non-linear or unknown
        transformer); the message names the step and the fix.
    """
    s = None
    for name, step in _transformers(estimator):
        t = _step_scale(name, step)
        if t is None:
            continue
        if n_features is not None and t.shape != (n_features,):
            raise ValueError(
                f"step {name!r} ({type(step).__name__}) scales {t.size} features but the final "
                f"estimator has {n_features}.")
        s = t if s is None else s * t
    return s


def scale_measure(measure, s):
    """``(ω, S M S, S a)``: the measure on ``x`` of ``measure`` fitted on ``x' = s ⊙ x``."""
    s = np.asarray(s, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        M = measure.M * s[:, None] * s[None, :]
        a = measure.a * s
    if not (np.all(np.isfinite(M)) and np.all(np.isfinite(a))):
        raise ValueError(
            f"mapping the fitted measure to raw coordinates overflows (scales up to "
            f"{np.max(np.abs(s)):.3g}): a feature has a near-zero scale. Drop constant features "
            "before the pipeline.")
    return MixingMeasure(measure.omega.copy(), M, a)


def fitted_model(estimator, what="metric"):
    """``(measure in raw coordinates, final estimator)`` of a fitted estimator or Pipeline.

    The final estimator must have ``gate``, ``activation`` and a fitted ``measure_``
    (duck-typed); ``what`` names the caller in messages.
    """
    est = final_estimator(estimator)
    if not (hasattr(est, "gate") and hasattr(est, "activation")):
        raise ValueError(
            f"the {what} needs an HMoERegressor (or a Pipeline ending in one); got "
            f"{type(est).__name__}, which has no gate/activation or fitted measure_."
        )
    measure = getattr(est, "measure_", None)
    if measure is None:
        raise NotFittedError(
            f"This {type(est).__name__} instance is not fitted yet (no measure_): call "
            f"fit(X, y) before scoring it with the {what}."
        )
    if not isinstance(measure, MixingMeasure):
        raise ValueError(
            f"{type(est).__name__}.measure_ must be a MixingMeasure; got "
            f"{type(measure).__name__}."
        )
    s = pipeline_scale(estimator, measure.n_features)
    if s is not None:
        measure = scale_measure(measure, s)
    return measure, est


def fitted_measure(estimator):
    """The fitted mixing measure of an estimator or a Pipeline, in raw input coordinates.

    For a plain estimator this is ``estimator.measure_``. For a
    :class:`~sklearn.pipeline.Pipeline` whose steps before the last scale each feature,
    ``x' = s ⊙ x`` (``StandardScaler(with_mean=False)``, ``MaxAbsScaler``,
    ``RobustScaler(with_centering=False)``, ``FunctionTransformer()``, ``"passthrough"``),
    the last step's ``measure_ = (ω', M', a')`` is mapped to ``(ω', S M' S, S a')`` with
    ``S = diag(s)``: its regression function on raw ``X`` is the pipeline's prediction
    (minus the final step's ``intercept_``, which the map leaves unchanged). Pass the result
    to :func:`~hmoe_estim.voronoi_loss`, :func:`~hmoe_estim.expert_error` or
    :func:`~hmoe_estim.regression_error`; the scorers do this themselves.

    Parameters
    ----------
    estimator : fitted HMoERegressor or Pipeline ending in one

    Returns
    -------
    MixingMeasure

    Raises
    ------
    ValueError
        A step that is not a per-feature scaling (centring, PCA, a non-linear or unknown
        transformer): the message names the step and the fix (``with_mean=False``, or score
        the final estimator against the truth in the transformed coordinates); a final step
        without ``gate``/``activation``. ``sklearn.exceptions.NotFittedError`` (a
        ``ValueError``) for an unfitted estimator.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from hmoe_estim import G2Regressor
    >>> from hmoe_estim.metrics import fitted_measure
    >>> # pipe = make_pipeline(StandardScaler(with_mean=False), G2Regressor()).fit(X, y)
    >>> # voronoi_loss(fitted_measure(pipe), G_true, gate="value")
    """
    return fitted_model(estimator, what="fitted_measure")[0]
