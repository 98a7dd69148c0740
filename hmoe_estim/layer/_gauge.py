"""Gauge rebalancing of a fitted layer: the same function, factors of equal size.

A layer's function is unchanged by ``W_Q,h → W_Q,h A, W_K,h → W_K,h A⁻ᵀ`` (bilinear factored
scores) and, where nothing non-linear sits between them, ``W_V,h → W_V,h B, W_O,h → B⁻¹ W_O,h``
(``B`` diagonal for the elementwise multiplicative gate). Along these directions a fit can let
one factor grow and the other shrink — towards the box of the search — at no change of the
objective. :func:`rebalance` moves each head to the point of its orbit where the factors
share the singular values equally:

- Q/K: ``√d_v P_h = W_Q,h W_K,hᵀ = U S Vᵀ`` (its ``d_v`` leading singular triplets), then
  ``W_Q,h = U √S``, ``W_K,h = V √S``;
- V/O (general ``B``): ``C_h = W_V,h W_O,h = U S Vᵀ``, then ``W_V,h = U √S``,
  ``W_O,h = √S Vᵀ`` (the ``d_v`` leading triplets; zero columns where ``C_h`` has fewer);
- V/O (diagonal ``B``): channel ``e`` scaled so that ``‖W_V,h[:, e]‖ = ‖W_O,h[e, :]‖``.

That point also minimises ``‖W_Q‖² + ‖W_K‖²`` and ``‖W_V‖² + ‖W_O‖²`` over the orbit (to
``2√d_v ‖P_h‖_*`` and ``2‖C_h‖_*``), the ridge penalty of the layer fit. Gates with a
non-linearity between the factors (``"key"``, ``"query"`` for Q/K; ``"value"``, ``"sdpa"``
with φ for V/O) keep their factors.
"""

import numpy as np

from ._parameters import AttentionLayer

__all__ = ["rebalance", "qk_gauge", "vo_gauge"]


def qk_gauge(layer, gate):
    """Whether the Q/K gauge is ``GL(d_v)``: factored bilinear scores."""
    return layer.qk == "factored" and gate in ("none", "value", "sdpa", "output")


def vo_gauge(layer, gate):
    """``"general"``, ``"diagonal"`` or ``None``: the V/O gauge of ``layer`` under ``gate``."""
    if layer.granularity == "headwise":
        return "general"
    if layer.granularity == "elementwise":
        return "diagonal"
    return "general" if gate in ("none", "output", "key", "query") else None


def _split(M, k):
    """``(L, R)`` with ``L Rᵀ = M`` (its ``k`` leading singular triplets, which hold all of
    ``M`` when its rank is at most ``k``) and ``L``, ``R`` sharing the singular values."""
    U, s, Vt = np.linalg.svd(M, full_matrices=False)
    r = min(k, s.size)
    L = np.zeros((M.shape[0], k))
    R = np.zeros((M.shape[1], k))
    root = np.sqrt(s[:r])
    L[:, :r] = U[:, :r] * root
    R[:, :r] = Vt[:r].T * root
    return L, R


def rebalance(layer, gate):
    """The layer of the same function with balanced factors (module docstring).

    Parameters
    ----------
    layer : AttentionLayer
    gate : str
        The gate position the layer is used with.

    Returns
    -------
    AttentionLayer
        A new layer (the input is not modified).
    """
    W_Q = None if layer.W_Q is None else layer.W_Q.copy()
    W_K = None if layer.W_K is None else layer.W_K.copy()
    W_V, W_O = layer.W_V.copy(), layer.W_O.copy()
    H, d, dv = W_V.shape
    if qk_gauge(layer, gate):
        for h in range(H):
            W_Q[h], W_K[h] = _split(W_Q[h] @ W_K[h].T, dv)
    kind = vo_gauge(layer, gate)
    for h in range(H):
        if kind == "general":
            W_V[h], R = _split(W_V[h] @ W_O[h], dv)
            W_O[h] = R.T
        elif kind == "diagonal":
            nv = np.linalg.norm(W_V[h], axis=0)
            no = np.linalg.norm(W_O[h], axis=1)
            ok = (nv > 0) & (no > 0)
            t = np.ones(dv)
            t[ok] = np.sqrt(no[ok] / nv[ok])
            W_V[h] *= t
            W_O[h] /= t[:, None]
    return AttentionLayer(W_V=W_V, W_O=W_O, W_Q=W_Q, W_K=W_K,
                          P=None if layer.P is None else layer.P.copy(),
                          W_theta=None if layer.W_theta is None else layer.W_theta.copy(),
                          intercept=None if layer.intercept is None else layer.intercept.copy())
