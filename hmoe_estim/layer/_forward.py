"""The output of a whole (gated) multi-head attention layer, on a batch of token matrices.

For one token matrix ``X ∈ R^{N×d}`` (rows ``x_i``) and head ``h`` (index dropped), with
``r = sqrt(d_v)`` and ``φ`` the activation:

- scores ``s_ij = (x_i W_Q)·(x_j W_K) / r`` (multi-head attention, the paper's Section 2), or
  ``x_iᵀ P x_j`` with full Q/K; for G3 (``gate="key"``) ``s_ij = Σ_e (x_i W_Q)_e φ((x_j
  W_K)_e) / r``, for G4 (``gate="query"``) ``s_ij = Σ_e φ((x_i W_Q)_e) (x_j W_K)_e / r``;
- ``S = softmax`` of each row of scores, over all ``N`` keys;
- head output ``S X W_V`` (MHA), ``S φ(X W_V)`` (G2, ``gate="value"``, the paper's eq. (9)),
  ``φ(S X W_V)`` (G1, ``gate="sdpa"``, eq. (12)), or, with the multiplicative gate of Qiu et
  al. (2025) at G1, ``(S X W_V) ⊙ φ(X W_θ)`` (headwise: one factor per row, broadcast over the
  channels; elementwise: one per row and channel);
- output ``Σ_h head_h W_O,h``, then ``φ`` of it for G5 (``gate="output"``), plus the
  intercept.

For gates ``none``, ``value``, ``sdpa`` and ``output`` with ``d_out = d`` this is
:func:`hmoe_estim.attention.multihead_attention` (the same conventions), and each entry
``(row, column)`` is the HMoE regression function of
:func:`hmoe_estim.attention.attention_to_measure`. The numbers are computed by the layer
kernel (:func:`hmoe_estim.kernels.layer_values`), which also gives the Jacobian of a fit.
"""

import numpy as np

from ._parameters import AttentionLayer, check_form

__all__ = ["attention_layer_output", "check_tokens"]


def check_tokens(X, d):
    """``X`` as a C-contiguous float64 array of shape ``(n, N, d)``, else a ``ValueError``."""
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"X must be a numeric array; got {type(X).__name__}.") from exc
    if X.ndim != 3:
        hint = " For one token matrix use X[None]." if X.ndim == 2 else ""
        raise ValueError(
            f"X must have shape (n, N, d) (n samples of N tokens of dimension d); got shape "
            f"{X.shape}.{hint}")
    if X.shape[1] < 1 or X.shape[2] != d:
        raise ValueError(f"X must have shape (n, N, d) with N >= 1 and d = {d} (the rows of "
                         f"W_V); got {X.shape}.")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinite values.")
    return np.ascontiguousarray(X)


def attention_layer_output(X, layer, *, gate="none", activation="sigmoid", gate_form=None,
                           rows="all"):
    """Output of the attention layer ``layer`` on the token matrices ``X``.

    Parameters
    ----------
    X : array-like of shape (n, N, d)
        ``n`` samples, each a matrix of ``N`` tokens (rows) of dimension ``d``.
    layer : AttentionLayer
    gate : {"none", "value", "sdpa", "output", "key", "query"}, default="none"
        MHA, G2, G1, G5, G3, G4 (module docstring).
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
        ``φ`` (ignored for ``gate="none"``); the gate function of the multiplicative form.
    gate_form : {"activation", "multiplicative"} or None
        ``None``: multiplicative when the layer has ``W_theta``. The multiplicative form goes
        with ``gate="sdpa"`` only.
    rows : {"all", "last"}, default="all"

    Returns
    -------
    ndarray of shape (n, N, d_out), or (n, d_out) with ``rows="last"``

    Raises
    ------
    ValueError
        ``X`` not 3-D or of another ``d``, an unknown name, a combination the layer cannot
        hold (full Q/K with G3/G4, a multiplicative form without ``W_theta``, …).
    """
    if not isinstance(layer, AttentionLayer):
        raise ValueError(f"layer must be an AttentionLayer; got {type(layer).__name__}.")
    check_form(layer, gate, activation, gate_form, rows)
    X = check_tokens(X, layer.d)
    from ..kernels import layer_values

    layout = layer.layout
    n, N, _ = X.shape
    R = 1 if rows == "last" else N
    out = np.empty(n * R * layer.d_out)
    layer_values(layout.pack(layer), X, *layout.kernel_args(gate, activation, rows), out)
    if not np.all(np.isfinite(out)):
        raise ValueError(
            f"the layer's output overflows float64 (|X| up to {np.max(np.abs(X)):.3g}); "
            "rescale X or the weights to moderate values.")
    return out.reshape((n, layer.d_out) if rows == "last" else (n, N, layer.d_out))
