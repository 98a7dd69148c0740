"""Checks and scalings of :meth:`HMoERegressor.fit` that keep a fit from going silently wrong.

- :func:`check_target` — ``y`` must be numeric: ``None`` and strings are refused with a message
about ``y`` (before scikit-learn's generic checks).
- :func:`check_fit_size` — the memory a fit would need (parameters, L-BFGS-B's workspace and
  the kernels' per-thread temporaries) is estimated from the shape *before* anything is
  allocated; a request above :data:`MAX_FIT_BYTES` is refused, saying what it would need.
- :func:`target_scale` — when the root-mean-square of ``y`` lies outside ``[1/16, 16]``, the
  least-squares problem of eq. (3) is solved on ``y / s`` with ``s`` the power of two nearest
  to it. For the gates whose
  regression function is linear in ``omega`` (MHA eq. (2), G2 eq. (9), G1 eq. (12)),
  ``f_{s·omega, M, a} = s · f_{omega, M, a}``, so the fit of ``y / s`` with the bounds of
  ``omega`` divided by ``s`` is the fit of ``y`` with the original bounds (A.1)-(A.2); its
  ``omega`` is multiplied back by ``s``. L-BFGS-B's tolerances (``ftol`` relative with a floor
  of 1, ``gtol`` absolute) then act on an objective of order one whatever the unit of ``y``.
  A power of two makes ``y / s`` exact. :func:`input_scale` does the same for ``X`` (``M``
  and ``a`` absorb it in every gate). The output gate (G5, ``φ(f_MHA)``) is not linear in
  ``omega`` and is fitted unscaled.
- :func:`warn_if_at_bound` — a fit whose channel weights sit at ``omega_max`` is limited by
  the box of (A.1), not by the data; the warning gives the target's scale and the fix.
"""

import math
import warnings

import numpy as np

__all__ = ["MAX_FIT_BYTES", "check_fit_size", "check_target", "fit_memory_bytes", "input_scale",
           "scaled_gates", "target_scale", "theta_factors", "warn_if_at_bound"]

#: Largest estimated working memory of one fit (bytes). Above it ``fit`` refuses to start.
MAX_FIT_BYTES = 4 * 2**30
#: Samples per block of the kernels (``hmoe_estim/kernels/objective.py``).
_BLOCK = 256
#: RMS of y (or X) inside which no internal scaling happens.
_SCALE_LOW, _SCALE_HIGH = 1.0 / 16.0, 16.0
#: Gates whose regression function is ``Σ_h Σ_k ω[h,k] (…)``: linear in ``omega``.
scaled_gates = ("none", "value", "sdpa")


def check_target(y):
    """Refuse a ``y`` that is not numeric, with a message about ``y``.

    Only object and string arrays are examined (complex ones are refused by scikit-learn); anything
    else is left to
    :func:`sklearn.utils.validation.validate_data`.
    """
    if y is None:  # scikit-learn's own message ("requires y to be passed")
        return
    arr = np.asarray(y) if not hasattr(y, "dtype") else y
    kind = getattr(getattr(arr, "dtype", None), "kind", None)
    if kind in ("U", "S"):
        raise ValueError(
            f"y must be numeric; got strings (dtype {arr.dtype}). Convert it with "
            "np.asarray(y, dtype=float) or encode the target as numbers."
        )
    if kind == "O":
        flat = np.ravel(np.asarray(arr, dtype=object))
        missing = [j for j, v in enumerate(flat) if v is None]
        if missing:
            raise ValueError(
                f"y contains {len(missing)} missing value(s) (None, first at index "
                f"{missing[0]}); remove or impute them before fit."
            )
        bad = [j for j, v in enumerate(flat)
               if isinstance(v, (str, bytes, complex)) or not _is_real(v)]
        if bad:
            raise ValueError(
                f"y must be numeric; entry {bad[0]} is {flat[bad[0]]!r} "
                f"({type(flat[bad[0]]).__name__}). Convert y to floats before fit."
            )


def _is_real(v):
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


def fit_memory_bytes(shape, n_samples, gate, n_threads=1):
    """Estimated peak memory (bytes) of one fit of ``shape = (H, N, K, D)``.

    ``P`` parameters cost about 600 bytes each (theta, gradient, bounds as Python tuples and
    arrays, L-BFGS-B's workspace of ``(2m + 5) P`` doubles with ``m = 10``) plus 8 bytes per
    chunk of 256 samples (one partial sum each, at most 64); every kernel worker (at most one
    per chunk) holds rows × 256 doubles of temporaries, with
    ``4 H N K`` rows for the value gate, ``H N K`` for the SDPA gate and ``H N`` otherwise
    (``hmoe_estim/kernels/objective.py``); the data are ``2 n D`` doubles.
    """
    from ..model import n_params

    H, N, K, D = (int(v) for v in shape)
    P = n_params(H, N, K, D)
    T = D * (D + 1) // 2
    if gate == "value":
        rows = 4 * H * N * K + 2 * H * N
    elif gate == "sdpa":
        rows = H * N * K + 3 * H * K + H * N
    else:
        rows = 2 * H * N
    rows += D + T + 2 * N + K + 16
    n_chunks = max(1, min(64, (int(n_samples) + _BLOCK - 1) // _BLOCK))
    workers = max(1, min(int(n_threads), n_chunks))  # the kernels use one per chunk at most
    return 8 * (rows * _BLOCK * workers + P * (60 + n_chunks)) + 128 * P \
        + 16 * int(n_samples) * D


def check_fit_size(shape, n_samples, gate, n_threads=1):
    """Raise ``ValueError`` before any allocation when a fit would need > :data:`MAX_FIT_BYTES`."""
    from ..model import n_params

    need = fit_memory_bytes(shape, n_samples, gate, n_threads)
    if need > MAX_FIT_BYTES:
        H, N, K, D = shape
        raise ValueError(
            f"a fit with n_heads={H}, n_tokens={N}, n_experts={K} on {D} features has "
            f"{n_params(H, N, K, D)} parameters and would need about {need / 2**30:.1f} GiB "
            f"(limit {MAX_FIT_BYTES / 2**30:.0f} GiB) for {n_samples} samples. Use fewer "
            "heads, tokens or channels."
        )


def _pow2_scale(values):
    """The power of two nearest to ``rms(values)`` if that lies outside ``[1/16, 16]``, else 1.

    Computed without overflow for any finite array (divided by ``max |values|`` first). Data of
    moderate scale are left untouched, so their fits are bit-identical to unscaled ones.
    """
    big = float(np.max(np.abs(values))) if values.size else 0.0
    if not big > 0:
        return 1.0
    rms = big * math.sqrt(float(np.mean((values / big) ** 2)))
    if _SCALE_LOW <= rms <= _SCALE_HIGH:
        return 1.0
    return math.ldexp(1.0, round(math.log2(rms)))


def target_scale(y, gate):
    """``s_y``: the fit works on ``y / s_y`` (1 for the output gate, see the module notes)."""
    if gate not in scaled_gates:
        return 1.0
    return _pow2_scale(y)


def input_scale(X):
    """``s_x``: the fit works on ``X / s_x``, with ``M · s_x²`` and ``a · s_x`` (every gate:
    ``xᵀ M x`` and ``a·x`` are unchanged), so the box of (A.1) is kept in the units of ``X``."""
    return _pow2_scale(X)


def theta_factors(shape, s_y, s_x):
    """``v`` with ``theta_scaled = theta * v``: ``1/s_y`` on omega, ``s_x²`` on M, ``s_x`` on a."""
    from ..model import n_params

    H, N, K, D = shape
    T = D * (D + 1) // 2
    o1 = H * K
    o2 = o1 + H * (N - 1) * T
    v = np.empty(n_params(H, N, K, D))
    v[:o1] = 1.0 / s_y
    v[o1:o2] = s_x * s_x
    v[o2:] = s_x
    return v


def _rms(values):
    big = float(np.max(np.abs(values))) if values.size else 0.0
    return big * math.sqrt(float(np.mean((values / big) ** 2))) if big > 0 else 0.0


def warn_if_at_bound(measure, omega_max, param_bound, X, y, gate, objective, stacklevel=3):
    """Warn when the box of (A.1) limits the fit: a weight at ``omega_max``, or an expert
    entry ``a`` at ``±param_bound`` while ``X`` is far from unit scale.

    Under MHA (eq. (2)) and the output gate ``omega[h, k]`` and ``a[h, :, k]`` trade off (only
    their product
    matters), so a weight at its bound counts only when its channel's ``a`` is at its bound
    too. An ``a`` at the bound with inputs of moderate scale is not reported: in an
    over-specified fit the extra atoms may wander to the box without limiting the fit.
    A target whose offset dominates its spread and that the fit explains worse than its mean
    (training R² < 0; no model of eq. (2) has a constant term) is reported too.

    The message gives the target's mean and spread (or the inputs' scale) and the fix; a target
    whose mean dominates its spread gets the hint to fit an intercept (``fit_intercept=True``)
    or to centre ``y``.
    """
    at_omega = measure.omega >= omega_max * (1.0 - 1e-6)  # (H, K)
    at_a = np.abs(measure.a) >= param_bound * (1.0 - 1e-6)  # (H, N, K, D)
    if gate in ("none", "output"):  # omega and a enter as products (inside φ for G5)
        at_omega = at_omega & at_a.any(axis=(1, 3))
    omega_hit = bool(np.any(at_omega))
    a_hit = bool(np.any(at_a)) and not _SCALE_LOW <= _rms(X) <= _SCALE_HIGH
    big = float(np.max(np.abs(y))) if y.size else 0.0
    mean = big * float(np.mean(y / big)) if big > 0 else 0.0
    spread = big * float(np.std(y / big)) if big > 0 else 0.0
    offset = abs(mean) > 10.0 * spread
    if not (omega_hit or a_hit or (offset and objective > spread * spread)):
        return
    if omega_hit or a_hit:
        what = (f"channel weights omega reach omega_max = {omega_max:g}" if omega_hit else
                f"expert entries a reach param_bound = {param_bound:g}")
        what += ": the fit is limited by the box of (A.1), not by the data"
    else:
        what = ("the fit explains less than the target's mean (training R² < 0): the HMoE "
                "regression function has no constant term")
    msg = (
        f"{what} (the target has mean {mean:.3g} and standard deviation {spread:.3g}; the "
        f"inputs X have root mean square {_rms(X):.3g}). "
    )
    if offset:
        msg += ("The target's offset dominates: centre y or fit an intercept "
                "(fit_intercept=True), or raise omega_max.")
    elif omega_hit:
        msg += (f"Raise omega_max (to about {max(2.0 * omega_max, 2.0 * big):.3g}) or rescale y "
                "(e.g. sklearn.compose.TransformedTargetRegressor with a StandardScaler).")
    else:
        msg += ("Raise param_bound or rescale X (e.g. with a StandardScaler) and y to moderate "
                "values.")
    warnings.warn(msg, UserWarning, stacklevel=stacklevel)
