"""Gauge-invariant metrics of a fitted attention layer against the true layer.

A fitted layer is determined only up to its gauges (:mod:`hmoe_estim.layer`, "Gauges"):
``W_Q,h → W_Q,h A, W_K,h → W_K,h A⁻ᵀ`` and, where nothing non-linear sits between them (MHA,
G5, G3, G4, the headwise multiplicative gate), ``W_V,h → W_V,h B, W_O,h → B⁻¹ W_O,h``; G1 and
G2 identify the value channels up to a permutation (and a sign for an odd ``φ``); the heads
are unlabelled everywhere. The metrics here compare what the layer determines:

- :func:`layer_regression_error`: ``‖f̂ − f*‖`` over reference token matrices (the paper's
  Proposition 1, every output entry of the layer at once);
- :func:`head_matching` and :func:`layer_parameter_errors`: ``‖P̂_h − P*_h‖_F`` and
  ``‖Ĉ_h − C*_h‖_F`` with ``P_h = W_Q,h W_K,hᵀ / sqrt(d_v)`` and ``C_h = W_V,h W_O,h``,
  after matching the heads;
- :func:`layer_voronoi_loss`: for G1 and G2, the Voronoi loss of the paper's Section 3 over
  the layer's atoms ``(P_h, W_V,h[:, k])`` with vector weights ``W_O,h[k, :]``;
- :func:`entry_voronoi_loss`: the paper's Voronoi loss of one output entry, both layers mapped
  to the entry's mixing measure (:func:`hmoe_estim.attention.attention_to_measure`), raw or
  after aligning the fit to the truth's V/O gauge (:func:`align_layer`, an oracle: it uses
  the truth, and says so);
- :func:`make_layer_scorer`: any of these as a scikit-learn scorer of an
  :class:`AttentionLayerRegressor`.

Reference token matrices: ``n_ref`` matrices of ``N`` i.i.d. standard normal tokens drawn
with ``numpy.random.default_rng(random_state)`` (the default tokens of
:func:`make_attention_regression`), or the ``X`` given.
"""

import inspect
import numbers
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.utils.validation import check_is_fitted

from .._names import ODD_ACTIVATIONS
from .._validation import check_r, check_token_matching
from ..kernels import phi
from ..metrics import DEFAULT_N_REF, branch_distances
from ._estimator import AttentionLayerRegressor
from ._forward import attention_layer_output, check_tokens
from ._parameters import AttentionLayer, check_form

__all__ = [
    "LAYER_METRICS",
    "LayerParameterErrors",
    "LayerVoronoiDetails",
    "EntryVoronoiLoss",
    "LayerMetricScorer",
    "layer_regression_error",
    "head_matching",
    "layer_parameter_errors",
    "layer_voronoi_loss",
    "align_layer",
    "entry_voronoi_loss",
    "make_layer_scorer",
]

#: Gates of the layer Voronoi loss: their value channels are identified up to permutation
#: (and sign for an odd ``φ``), so the atoms ``(P_h, W_V,h[:, k])`` are.
VORONOI_GATES = ("value", "sdpa")
#: Gates whose output entries are HMoEs (per-entry measures).
ENTRY_GATES = ("none", "value", "sdpa", "output")
#: Metric names of :func:`make_layer_scorer`.
LAYER_METRICS = ("regression_error", "P_error", "VO_error", "P_relative_error",
                 "VO_relative_error", "voronoi_loss", "entry_voronoi_loss")


def _sign_symmetric(gate, activation, sign_symmetry="auto"):
    """Whether the channel sign flip ``(o, w) → (−o, −w)`` is quotiented (as in
    :func:`hmoe_estim.metrics.voronoi_loss`)."""
    if isinstance(sign_symmetry, str) and sign_symmetry == "auto":
        return gate in VORONOI_GATES and activation in ODD_ACTIVATIONS
    if isinstance(sign_symmetry, (bool, np.bool_)):
        return bool(sign_symmetry)
    raise ValueError(f"sign_symmetry must be 'auto', True or False; got {sign_symmetry!r}.")


# -- inputs -----------------------------------------------------------------------------
def _as_layer(obj, name):
    """``(AttentionLayer, estimator or None)`` of a layer or a fitted regressor."""
    if isinstance(obj, AttentionLayer):
        return obj, None
    if isinstance(obj, AttentionLayerRegressor):
        check_is_fitted(obj, "layer_")
        return obj.layer_, obj
    raise ValueError(f"{name} must be an AttentionLayer or a fitted AttentionLayerRegressor; "
                     f"got {type(obj).__name__}.")


def _truth(true_layer):
    if not isinstance(true_layer, AttentionLayer):
        raise ValueError(f"true_layer must be an AttentionLayer (e.g. from "
                         f"random_attention_layer); got {type(true_layer).__name__}.")
    return true_layer


def _check_pair(fit, true, *, same_heads=False, same_head_dim=False):
    """Raise a ``ValueError`` saying what to change when the layers cannot be compared."""
    if fit.d != true.d or fit.d_out != true.d_out:
        raise ValueError(
            f"the fitted layer has d = {fit.d}, d_out = {fit.d_out} but the true layer has "
            f"d = {true.d}, d_out = {true.d_out}: fit on tokens of dimension {true.d} with "
            f"{true.d_out} output columns (data generated from the true layer).")
    if same_heads and fit.n_heads != true.n_heads:
        raise ValueError(
            f"the fitted layer has {fit.n_heads} heads but the true layer has "
            f"{true.n_heads}: heads are matched one to one, so fit with "
            f"n_heads={true.n_heads} (H* is assumed known).")
    if same_head_dim and fit.head_dim != true.head_dim:
        raise ValueError(
            f"the fitted layer has head_dim {fit.head_dim} but the true layer has "
            f"{true.head_dim}: the V/O alignment B is a square d_v×d_v matrix, so fit with "
            f"head_dim={true.head_dim}, or compare through layer_parameter_errors.")


def _resolve_form(est, gate, activation, gate_form, rows, *, rows_default="all"):
    """The model's names: given, else the estimator's (``rows`` may differ from it)."""
    given = {"gate": gate, "activation": activation, "gate_form": gate_form}
    if est is not None:
        for name, value in given.items():
            own = getattr(est, name)
            if value is None:
                given[name] = own
            elif value != own:
                raise ValueError(
                    f"{name}={value!r} but the estimator was fitted with {name}={own!r}: "
                    f"pass {name}={own!r} or leave it out (None reads the estimator's).")
        if rows is None:
            rows = est.rows
    else:
        if gate is None:
            raise ValueError(
                "gate is needed for an AttentionLayer: pass gate='none' (MHA), 'value' (G2), "
                "'sdpa' (G1), 'output' (G5), 'key' (G3) or 'query' (G4).")
        if given["activation"] is None:
            given["activation"] = "sigmoid"
    if rows is None:
        rows = rows_default
    return given["gate"], given["activation"], given["gate_form"], rows


def _n_tokens(n_tokens, est):
    if n_tokens is None and est is not None:
        return int(est.n_tokens_)
    if isinstance(n_tokens, (bool, np.bool_)) or not isinstance(n_tokens, numbers.Integral) \
            or n_tokens < 1:
        raise ValueError(f"n_tokens must be an integer >= 1 (the sequence length N of the "
                         f"reference token matrices), or give X; got {n_tokens!r}.")
    return int(n_tokens)


def _reference(X, n_tokens, est, d, n_ref, random_state):
    """Reference token matrices ``(n_ref, N, d)``: ``X``, or i.i.d. standard normal tokens."""
    if X is not None:
        X = check_tokens(X, d)
        if n_tokens is not None and n_tokens != X.shape[1]:
            raise ValueError(f"n_tokens = {n_tokens!r} but X has N = {X.shape[1]} tokens: "
                             "give one of them.")
        return X
    N = _n_tokens(n_tokens, est)
    if isinstance(n_ref, (bool, np.bool_)) or not isinstance(n_ref, numbers.Integral) \
            or n_ref < 1:
        raise ValueError(f"n_ref must be a positive integer; got {n_ref!r}.")
    rng = np.random.default_rng(random_state)
    return rng.normal(size=(int(n_ref), N, d))


# -- regression error ---------------------------------------------------------------------
def layer_regression_error(layer, true_layer, X=None, *, gate=None, activation=None,
                           gate_form=None, rows=None, n_tokens=None, n_ref=DEFAULT_N_REF,
                           random_state=0):
    """Root mean square difference of the two layers' outputs (paper, Proposition 1).

    ``sqrt(mean over samples, rows and columns of (f̂(X) − f*(X))²)``, the ``L2`` distance
    ``‖f_Ĝ − f_{G*}‖`` of :func:`hmoe_estim.metrics.regression_error` taken over every output
    entry of the layer (intercepts included). With ``d_out = 1`` and ``rows="last"`` it is
    ``regression_error`` of the two entry measures of the last row on ``X.reshape(n, -1)``.

    Parameters
    ----------
    layer : AttentionLayer or fitted AttentionLayerRegressor
        The fitted layer.
    true_layer : AttentionLayer
        The truth: same ``d`` and ``d_out``; ``H`` and ``d_v`` may differ.
    X : array-like of shape (n, N, d), optional
        Reference token matrices. Default: ``n_ref`` matrices of ``n_tokens`` i.i.d.
        standard normal tokens.
    gate, activation, gate_form : str or None
        As in :func:`attention_layer_output`. ``None``: the estimator's (an
        ``AttentionLayer`` needs ``gate``; its activation defaults to ``"sigmoid"``).
    rows : {"all", "last"} or None
        Output rows compared; ``None``: the estimator's, else ``"all"``.
    n_tokens : int or None
        ``N`` of the default reference sample; ``None``: the estimator's ``n_tokens_``.
    n_ref : int, default=4096
    random_state : int, default=0
        Seed of the default reference sample.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Layers of another ``d`` or ``d_out``, names the layers cannot hold, a ``gate``
        other than the estimator's, no ``n_tokens`` nor ``X``.
    """
    fit, est = _as_layer(layer, "layer")
    true = _truth(true_layer)
    gate, activation, gate_form, rows = _resolve_form(est, gate, activation, gate_form, rows)
    gate_form = check_form(fit, gate, activation, gate_form, rows)
    check_form(true, gate, activation, gate_form, rows)
    _check_pair(fit, true)
    X = _reference(X, n_tokens, est, fit.d, n_ref, random_state)
    kw = dict(gate=gate, activation=activation, gate_form=gate_form, rows=rows)
    diff = attention_layer_output(X, fit, **kw) - attention_layer_output(X, true, **kw)
    return float(np.sqrt(np.mean(diff * diff)))


# -- P and C errors -----------------------------------------------------------------------
def _sq_norms(A):
    A = A.reshape(A.shape[0], -1)
    return np.einsum("hi,hi->h", A, A)


def head_matching(layer, true_layer):
    """The fitted head matched to each true head, by ``P_h`` and ``C_h = W_V,h W_O,h``.

    Solves the assignment (:func:`scipy.optimize.linear_sum_assignment`) with cost
    ``‖P̂_h' − P*_h‖_F² / p + ‖Ĉ_h' − C*_h‖_F² / c`` for fitted head ``h'`` and true head
    ``h``, where ``p`` and ``c`` are the mean squared norms of the true ``P*_h`` and ``C*_h``
    (1 when 0), so that both terms are unit-free. Both quantities are invariant under the
    Q/K and V/O gauges, so the matching is too.

    Parameters
    ----------
    layer : AttentionLayer or fitted AttentionLayerRegressor
    true_layer : AttentionLayer
        Same ``H``, ``d`` and ``d_out``.

    Returns
    -------
    ndarray of shape (H,), int
        ``heads[h]`` = fitted head matched to true head ``h``.

    Raises
    ------
    ValueError
        Layers of another ``H``, ``d`` or ``d_out``.
    """
    fit, _ = _as_layer(layer, "layer")
    true = _truth(true_layer)
    _check_pair(fit, true, same_heads=True)
    return _match_heads(fit, true)


def _match_heads(fit, true):
    P, Ps, C, Cs = fit.P_, true.P_, fit.VO_, true.VO_
    p = float(np.mean(_sq_norms(Ps))) or 1.0
    c = float(np.mean(_sq_norms(Cs))) or 1.0
    dP = P[:, None] - Ps[None, :]
    dC = C[:, None] - Cs[None, :]
    cost = np.einsum("abij,abij->ab", dP, dP) / p + np.einsum("abij,abij->ab", dC, dC) / c
    rows, cols = linear_sum_assignment(cost)
    heads = np.empty(true.n_heads, dtype=np.intp)
    heads[cols] = rows
    return heads


@dataclass
class LayerParameterErrors:
    """Errors of the gauge-invariant parameters of a layer, after matching the heads.

    Attributes
    ----------
    heads : ndarray of shape (H,), int
        ``heads[h]`` = fitted head matched to true head ``h`` (:func:`head_matching`).
    P_error : float
        ``sqrt(Σ_h ‖P̂_heads[h] − P*_h‖_F²)``.
    VO_error : float
        ``sqrt(Σ_h ‖Ĉ_heads[h] − C*_h‖_F²)``, ``C_h = W_V,h W_O,h``.
    P_relative_error, VO_relative_error : float
        The errors divided by ``‖P*‖_F`` and ``‖C*‖_F`` (NaN when that norm is 0).
    P_errors, VO_errors : ndarray of shape (H,)
        Per true head ``h``: ``‖P̂_heads[h] − P*_h‖_F`` and ``‖Ĉ_heads[h] − C*_h‖_F``.
    P_relative_errors, VO_relative_errors : ndarray of shape (H,)
        Per true head, divided by ``‖P*_h‖_F`` and ``‖C*_h‖_F`` (NaN where 0).
    """

    heads: np.ndarray
    P_error: float
    VO_error: float
    P_relative_error: float
    VO_relative_error: float
    P_errors: np.ndarray
    VO_errors: np.ndarray
    P_relative_errors: np.ndarray
    VO_relative_errors: np.ndarray

    def to_dict(self):
        """The attributes as a dict (arrays as lists)."""
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                for k, v in self.__dict__.items()}


def _ratio(num, den):
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    out = np.full(np.shape(num), np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def layer_parameter_errors(layer, true_layer, *, heads=None):
    """``‖P̂_h − P*_h‖_F`` and ``‖Ĉ_h − C*_h‖_F`` per head and in total, after head matching.

    ``P_h = W_Q,h W_K,hᵀ / sqrt(d_v)`` (or the free ``P_h``, ``qk="full"``) is the gate
    matrix of the paper's Section 2 and ``C_h = W_V,h W_O,h`` the head's value-output map:
    both are invariant under the Q/K gauge ``(W_Q A, W_K A⁻ᵀ)`` and the V/O gauge
    ``(W_V B, B⁻¹ W_O)``, so these are the errors of what an MHA, G5 or headwise-gated layer
    identifies. For G1 and G2 they are invariant too (channel permutations and, for an odd
    ``φ``, signs leave ``C_h`` unchanged), and for G3/G4 ``P_h`` is the product of the
    query and key weights, invariant under their column permutations and signs. ``W_θ`` and
    the intercept are not compared.

    Parameters
    ----------
    layer : AttentionLayer or fitted AttentionLayerRegressor
    true_layer : AttentionLayer
        Same ``H``, ``d`` and ``d_out``; ``d_v`` and the Q/K form may differ.
    heads : array-like of shape (H,) or None
        ``heads[h]`` = fitted head compared with true head ``h``; ``None``:
        :func:`head_matching`.

    Returns
    -------
    LayerParameterErrors

    Raises
    ------
    ValueError
        Layers of another ``H``, ``d`` or ``d_out``; ``heads`` not a permutation of
        ``range(H)``.

    Examples
    --------
    >>> import numpy as np
    >>> from hmoe_estim.layer import (AttentionLayer, layer_parameter_errors,
    ...                               random_attention_layer)
    >>> truth = random_attention_layer(2, 3, 2, random_state=0)
    >>> B = np.array([[2.0, 1.0], [0.0, 1.0]])      # a V/O gauge of head 0
    >>> W_V, W_O = truth.W_V.copy(), truth.W_O.copy()
    >>> W_V[0], W_O[0] = W_V[0] @ B, np.linalg.inv(B) @ W_O[0]
    >>> moved = AttentionLayer(W_V=W_V[::-1], W_O=W_O[::-1], P=truth.P_[::-1])
    >>> res = layer_parameter_errors(moved, truth)
    >>> res.heads.tolist(), bool(res.P_error < 1e-12 and res.VO_error < 1e-12)
    ([1, 0], True)
    """
    fit, _ = _as_layer(layer, "layer")
    true = _truth(true_layer)
    _check_pair(fit, true, same_heads=True)
    H = true.n_heads
    if heads is None:
        heads = _match_heads(fit, true)
    else:
        heads = np.asarray(heads)
        if heads.shape != (H,) or not np.array_equal(np.sort(heads), np.arange(H)):
            raise ValueError(f"heads must be a permutation of range({H}) (heads[h] = fitted "
                             f"head compared with true head h); got {heads.tolist()}.")
        heads = heads.astype(np.intp)
    dP = fit.P_[heads] - true.P_
    dC = fit.VO_[heads] - true.VO_
    P_errors, VO_errors = np.sqrt(_sq_norms(dP)), np.sqrt(_sq_norms(dC))
    nP, nC = np.sqrt(_sq_norms(true.P_)), np.sqrt(_sq_norms(true.VO_))
    P_error = float(np.sqrt(np.sum(P_errors ** 2)))
    VO_error = float(np.sqrt(np.sum(VO_errors ** 2)))
    return LayerParameterErrors(
        heads=heads, P_error=P_error, VO_error=VO_error,
        P_relative_error=float(_ratio(P_error, np.sqrt(np.sum(nP ** 2)))),
        VO_relative_error=float(_ratio(VO_error, np.sqrt(np.sum(nC ** 2)))),
        P_errors=P_errors, VO_errors=VO_errors,
        P_relative_errors=_ratio(P_errors, nP), VO_relative_errors=_ratio(VO_errors, nC))


# -- layer Voronoi loss -------------------------------------------------------------------
def _layer_branches(layer, X, gate, activation):
    """``B[x, i, h, k] = Σ_j S_h[i, j] e_{h,k}(x_j)``, shape ``(n, N, H, K)``: head ``h``'s
    channel ``k`` at row ``i`` before its weight ``W_O,h[k, :]`` (and before ``φ`` for G1);
    ``e = x·W_V,h[:, k]`` (G1), ``φ(x·W_V,h[:, k])`` (G2)."""
    s = np.einsum("nid,hde,nje->nhij", X, layer.P_, X, optimize=True)
    s -= s.max(axis=3, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=3, keepdims=True)
    V = np.einsum("njd,hdk->nhjk", X, layer.W_V, optimize=True)
    if gate == "value":
        V = phi(activation, V)
    return np.einsum("nhij,nhjk->nihk", s, V, optimize=True)


@dataclass
class LayerVoronoiDetails:
    """Parts of the layer Voronoi loss (``layer_voronoi_loss(..., return_details=True)``).

    Attributes
    ----------
    loss : float
        Mean of ``row_losses``.
    rows : ndarray of shape (R,), int
        The output rows ``i`` whose losses are averaged.
    row_losses : ndarray of shape (R,)
        ``weight_parts + atom_parts``.
    weight_parts : ndarray of shape (R,)
        ``Σ_{h,k} ‖Σ_{V_i[h,k]} s ô[h',k'] − o*[h,k]‖₂``.
    atom_parts : ndarray of shape (R,)
        ``Σ_{h,k} Σ_{V_i[h,k]} ‖ô[h',k']‖₂ c_i(h',k'; h,k)``.
    r : int or None
        ``r`` of ``L_{1,r}``; ``None`` for ``L_2``.
    assignments : ndarray of shape (R, H, K, 2), int
        ``assignments[t, h', k'] = (h, k)``: the cell of fitted channel ``(h', k')`` at row
        ``rows[t]``.
    signs : ndarray of shape (R, H, K), int
        The sign ``s`` of each fitted atom in its cell (``±1``; 1 without the sign symmetry).
    cell_exponents : ndarray of shape (R, H*, K*), int
        Exponent ``e`` of each cell (0 for an empty cell).
    atom_distances : ndarray of shape (R, H, K)
        ``c_i`` of each fitted channel in its cell.
    token_permutations : ndarray of shape (R, H, K, N), int
        The token matching of each fitted channel's entry atoms.
    """

    loss: float
    rows: np.ndarray
    row_losses: np.ndarray
    weight_parts: np.ndarray
    atom_parts: np.ndarray
    r: object
    assignments: np.ndarray
    signs: np.ndarray
    cell_exponents: np.ndarray
    atom_distances: np.ndarray
    token_permutations: np.ndarray

    def __float__(self):
        return float(self.loss)


def _check_voronoi_gate(gate, gate_form):
    if gate in ("none", "output"):
        raise ValueError(
            f"layer_voronoi_loss is defined for G1 (gate='sdpa') and G2 (gate='value'); with "
            f"gate={gate!r} the layer has the V/O gauge W_V B, B⁻¹ W_O, so its atoms "
            "W_V,h[:, k] are not identified. Use layer_parameter_errors (P_h, C_h), or "
            "entry_voronoi_loss(..., align=True).")
    if gate in ("key", "query"):
        raise ValueError(
            f"layer_voronoi_loss is defined for G1 (gate='sdpa') and G2 (gate='value'); with "
            f"gate={gate!r} (G3/G4) the scores are not quadratic forms x_iᵀ P x_j, so the "
            "layer has no quadratic gate P_h to build atoms on (and keeps the V/O gauge). Use "
            "layer_parameter_errors or layer_regression_error.")
    if gate_form != "activation":
        raise ValueError(
            "layer_voronoi_loss needs gate_form='activation' (φ on the signal, the paper's "
            "G1/G2); the multiplicative gate keeps the V/O gauge (headwise) or a per-channel "
            "scale (elementwise), so the atoms W_V,h[:, k] are not identified. Use "
            "layer_parameter_errors.")


def layer_voronoi_loss(layer, true_layer, *, gate=None, activation=None, r=None, X=None,
                       rows=None, n_tokens=None, n_ref=DEFAULT_N_REF, random_state=0,
                       token_matching="auto", sign_symmetry="auto", return_details=False):
    """Voronoi loss of a G1 or G2 layer over its atoms ``(P_h, W_V,h[:, k])`` with vector
    weights ``o_{h,k} = W_O,h[k, :] ∈ R^{d_out}``.

    The paper's Voronoi loss (Section 3; :func:`hmoe_estim.metrics.voronoi_loss`) with each
    scalar weight ``ω`` replaced by the vector ``o`` of the channel's output weights and
    ``|·|`` by the Euclidean norm over the output columns. For output row ``i``:

    - **cells** ``V_i[h, k]``: fitted channel ``(h', k')`` goes to the true channel whose
      branch ``B_{h,k}(X)_i = Σ_j S_h[i, j] e_{h,k}(x_j)`` (``e = x·W_V,h[:, k]`` for G1,
      ``φ(x·W_V,h[:, k])`` for G2; ``S_h`` the softmax of ``x_iᵀ P_h x_j``) is nearest in
      ``L2`` over the reference token matrices (ties: the first true channel);
    - **atom distance** ``c_i(h',k'; h,k)``: the paper's gauge-aware atom distance
      ``min_π Σ_j ‖ΔM_j‖_F^e + ‖Δa_j‖^e`` between the atoms the two channels induce on the
      output entry of row ``i`` (``M_j = J_iᵀ P_h J_j`` symmetrised and normalised,
      ``a_j = J_jᵀ W_V,h[:, k]``, :func:`~hmoe_estim.attention.attention_to_measure`), so it
      is a function of ``(P̂_h', ŵ; P*_h, w*)``, 0 when ``P̂_h' = P*_h`` and ``ŵ = w*``
      (and, for ``N >= 2`` and ``w* ≠ 0``, only then);
    - **loss** ``L_i = Σ_{h,k} ‖Σ_{V_i[h,k]} s ô_{h',k'} − o*_{h,k}‖₂
      + Σ_{h,k} Σ_{V_i[h,k]} ‖ô_{h',k'}‖₂ c_i(h',k'; h,k)`` with ``e = r`` (``L_{1,r}``), or
      for ``L_2`` ``e = 1`` in cells holding one fitted channel and 2 in cells holding more;
      ``s = ±1`` quotients the sign flip ``(o, w) → (−o, −w)`` of an odd ``φ`` (tanh) as the
      per-entry loss does (the smaller of ``‖B − B*‖`` and ``‖−B − B*‖`` chooses it, and the
      atom enters as ``s ŵ``); ``s = 1`` otherwise.

    The loss is ``L_{N-1}`` for ``rows="last"`` and ``(1/N) Σ_i L_i`` for ``rows="all"``. It
    is 0 at the truth and invariant to relabelling heads and channels, to the Q/K gauge and,
    for tanh, to channel signs.

    **Reduction to the paper's loss.** Branches, cells, signs and token matchings do not
    depend on the output column, so for ``d_out = 1`` (one column, ``o = ω`` a scalar) and the
    same reference sample, ``L_i`` *equals* ``voronoi_loss(G_i, G*_i, gate=gate,
    activation=activation, r=r, X_ref=X.reshape(n, -1))`` (the same ``token_matching`` and
    ``sign_symmetry``) where ``G_i`` and ``G*_i`` are the mixing measures of output entry
    ``(i, 0)`` (:meth:`~hmoe_estim.AttentionLayerRegressor.entry_measure`,
    :func:`~hmoe_estim.attention.attention_to_measure` with ``row=i``): one row and one column
    give the paper's loss of that entry, so ``rows="last"`` is the loss of the last entry and
    ``rows="all"`` the mean of the entries' losses. For ``d_out > 1``,
    ``max_c L_i(c) <= L_i <= Σ_c L_i(c)`` over the per-entry losses of the columns ``c``.

    Cost: one token matching per fitted channel and row, on ``N`` matrices of size
    ``(N·d)²`` (the per-entry loss's own cost); ``rows="all"`` is ``N`` times ``"last"``.

    Parameters
    ----------
    layer : AttentionLayer or fitted AttentionLayerRegressor
    true_layer : AttentionLayer
        Same ``d`` and ``d_out``; ``H`` and ``d_v`` may differ (over-specified fits).
    gate : {"value", "sdpa"} or None
        G2 or G1 with ``gate_form="activation"``; ``None``: the estimator's. Other gates are
        refused (their V/O gauge leaves ``W_V,h[:, k]`` unidentified, or G3/G4 have no
        quadratic gate).
    activation : {"sigmoid", "tanh", "gelu", "silu"} or None
        ``None``: the estimator's, else ``"sigmoid"``.
    r : int >= 1 or None, default=None
        ``None``: ``L_2``; an integer: ``L_{1,r}``.
    X : array-like of shape (n, N, d), optional
        Reference token matrices of the cells. Default: ``n_ref`` matrices of ``n_tokens``
        i.i.d. standard normal tokens.
    rows : {"all", "last"} or None
        ``None``: the estimator's, else ``"all"``.
    n_tokens : int or None
        ``N`` (``None``: from ``X`` or the estimator's ``n_tokens_``).
    n_ref : int, default=4096
    random_state : int, default=0
    token_matching : {"auto", "enumerate", "hungarian"}, default="auto"
        As in :func:`~hmoe_estim.metrics.voronoi_loss`.
    sign_symmetry : {"auto", True, False}, default="auto"
        As in :func:`~hmoe_estim.metrics.voronoi_loss`: ``"auto"`` quotients signs for tanh.
    return_details : bool, default=False
        Return a :class:`LayerVoronoiDetails` instead of a float.

    Returns
    -------
    float or LayerVoronoiDetails

    Raises
    ------
    ValueError
        A gate other than ``"value"``/``"sdpa"`` or a multiplicative gate (with the reason),
        layers of another ``d`` or ``d_out``, a bad ``r``, ``X``, ``rows`` or name.

    Examples
    --------
    >>> from hmoe_estim.layer import layer_voronoi_loss, random_attention_layer
    >>> truth = random_attention_layer(1, 2, 2, random_state=0)
    >>> layer_voronoi_loss(truth, truth, gate="sdpa", n_tokens=3, n_ref=16)
    0.0
    """
    fit, est = _as_layer(layer, "layer")
    true = _truth(true_layer)
    gate, activation, gate_form, rows = _resolve_form(est, gate, activation, None, rows)
    gate_form = check_form(fit, gate, activation, gate_form, rows)
    check_form(true, gate, activation, gate_form, rows)
    _check_voronoi_gate(gate, gate_form)
    r = check_r(r)
    check_token_matching(token_matching)
    _check_pair(fit, true)
    X = _reference(X, n_tokens, est, fit.d, n_ref, random_state)
    N = X.shape[1]
    signed = _sign_symmetric(gate, activation, sign_symmetry)
    B, Bs = _layer_branches(fit, X, gate, activation), _layer_branches(true, X, gate, activation)
    row_list = np.arange(N) if rows == "all" else np.array([N - 1])
    parts = [_row_loss(fit, true, B[:, i], Bs[:, i], N, int(i), r, signed, token_matching,
                       gate)
             for i in row_list]
    weight = np.array([p[0] for p in parts])
    atom = np.array([p[1] for p in parts])
    losses = weight + atom
    details = LayerVoronoiDetails(
        loss=float(np.mean(losses)), rows=row_list, row_losses=losses, weight_parts=weight,
        atom_parts=atom, r=r, assignments=np.stack([p[2] for p in parts]),
        signs=np.stack([p[3] for p in parts]), cell_exponents=np.stack([p[4] for p in parts]),
        atom_distances=np.stack([p[5] for p in parts]),
        token_permutations=np.stack([p[6] for p in parts]))
    return details if return_details else details.loss


def _atom_distance(G, Gs, hp, kp, h, k, sign, exponent, token_matching, gate):
    """``(π, c)``: the paper's gauge-aware atom distance between fitted channel ``(h', k')``
    of the entry measure ``G`` (as the signed atom ``sign·a``) and true channel ``(h, k)`` of
    ``Gs``, with its token matching: the per-entry loss of the two channels with unit
    weights, one cell of one channel (weight part 0, exponent ``exponent``)."""
    from ..metrics import voronoi_loss
    from ..model import MixingMeasure

    one = MixingMeasure([[1.0]], G.M[hp:hp + 1], sign * G.a[hp:hp + 1, :, kp:kp + 1])
    one_true = MixingMeasure([[1.0]], Gs.M[h:h + 1], Gs.a[h:h + 1, :, k:k + 1])
    det = voronoi_loss(one, one_true, gate=gate, r=exponent,
                       X_ref=np.zeros((1, G.n_features)), token_matching=token_matching,
                       sign_symmetry=False, return_details=True)
    return det.token_permutations[0, 0], float(det.atom_distances[0, 0])


def _row_loss(fit, true, B, Bs, N, row, r, signed, token_matching, gate):
    """Weight and atom parts of ``L_row`` and its cells (the per-entry construction of
    :func:`hmoe_estim.metrics.voronoi_loss` with vector weights)."""
    H, K = fit.n_heads, fit.head_dim
    Hs, Ks = true.n_heads, true.head_dim
    dist = branch_distances(B, Bs)
    pair_signs = np.ones(dist.shape, dtype=np.intp)
    if signed:
        flip = branch_distances(-B, Bs)
        pair_signs[flip < dist] = -1
        dist = np.minimum(dist, flip)
    flat = np.argmin(dist.reshape(H, K, Hs * Ks), axis=2)
    assignment = np.stack(np.unravel_index(flat, (Hs, Ks)), axis=-1).astype(np.intp)
    signs = pair_signs[np.arange(H)[:, None], np.arange(K)[None, :],
                       assignment[..., 0], assignment[..., 1]]
    sizes = np.zeros((Hs, Ks), dtype=np.intp)
    for hp in range(H):
        for kp in range(K):
            sizes[tuple(assignment[hp, kp])] += 1
    G, Gs = fit.entry_measure(row, 0, n_tokens=N), true.entry_measure(row, 0, n_tokens=N)
    o, os_ = fit.W_O, true.W_O  # (H, K, d_out)
    cell_weights = np.zeros((Hs, Ks, fit.d_out))
    exponents = np.where(sizes > 0, (1 if r is None else r), 0)
    if r is None:
        exponents = np.where(sizes > 1, 2, exponents)
    atom_dist = np.zeros((H, K))
    perms = np.zeros((H, K, N), dtype=np.intp)
    atom = 0.0
    for hp in range(H):
        for kp in range(K):
            h, k = assignment[hp, kp]
            s = int(signs[hp, kp])
            perms[hp, kp], atom_dist[hp, kp] = _atom_distance(
                G, Gs, hp, kp, h, k, s, int(exponents[h, k]), token_matching, gate)
            atom += float(np.linalg.norm(o[hp, kp])) * atom_dist[hp, kp]
            cell_weights[h, k] += s * o[hp, kp]
    weight = float(np.linalg.norm(cell_weights - os_, axis=2).sum())
    return weight, atom, assignment, signs, exponents, atom_dist, perms


# -- alignment to the truth's gauge and per-entry losses ----------------------------------
def _gauge_kind(gate, gate_form, granularity):
    if gate_form == "multiplicative":
        return "GL" if granularity == "headwise" else "monomial"
    return "permutation" if gate in VORONOI_GATES else "GL"


def align_layer(layer, true_layer, *, gate=None, activation=None, gate_form=None):
    """The fitted layer moved to the truth's V/O gauge (an oracle: it uses the truth).

    Heads are put in the truth's order (:func:`head_matching`); then, head by head, ``W_V,h →
    W_V,h B_h`` and ``W_O,h → B_h⁻¹ W_O,h`` with ``B_h`` the least-squares solution of
    ``min ‖Ŵ_V,h B − W*_V,h‖_F`` over the layer's V/O gauge group:

    - general invertible ``B`` (MHA, G5, G3, G4, the headwise multiplicative gate);
    - ``B = Π D``, a permutation times a diagonal (the elementwise multiplicative gate; its
      ``W_θ`` columns are permuted along);
    - ``B`` a permutation, signed for an odd ``φ`` (G1, G2): channels matched by the
      assignment on ``‖s ŵ_k' − w*_k‖²``.

    The layer's function is unchanged (the Q/K gauge is left alone: ``P_h`` does not see it).

    Parameters
    ----------
    layer : AttentionLayer or fitted AttentionLayerRegressor
    true_layer : AttentionLayer
        Same ``H``, ``d``, ``d_v`` and ``d_out``.
    gate, activation, gate_form : str or None
        ``None``: the estimator's (an ``AttentionLayer`` needs ``gate``).

    Returns
    -------
    AttentionLayer

    Raises
    ------
    ValueError
        Layers of another ``H``, ``d``, ``d_v`` or ``d_out``; a least-squares ``B_h`` that is
        not invertible (the fitted ``W_V,h`` has rank below ``d_v``).
    """
    fit, est = _as_layer(layer, "layer")
    true = _truth(true_layer)
    gate, activation, gate_form, rows = _resolve_form(est, gate, activation, gate_form, None)
    gate_form = check_form(fit, gate, activation, gate_form, rows)
    check_form(true, gate, activation, gate_form, rows)
    _check_pair(fit, true, same_heads=True, same_head_dim=True)
    heads = _match_heads(fit, true)
    kind = _gauge_kind(gate, gate_form, fit.granularity)
    odd = _sign_symmetric(gate, activation) if kind == "permutation" else False
    W_V, W_O = fit.W_V[heads].copy(), fit.W_O[heads].copy()
    W_theta = None if fit.W_theta is None else fit.W_theta[heads].copy()
    for h in range(true.n_heads):
        V, Vs = W_V[h], true.W_V[h]
        if kind == "GL":
            Bh = np.linalg.lstsq(V, Vs, rcond=None)[0]
            if np.linalg.cond(Bh) > 1e12:
                raise ValueError(
                    f"the least-squares V/O alignment of head {h} is singular (the fitted "
                    "W_V of that head has rank below d_v): no gauge maps it to the truth's; "
                    "compare through layer_parameter_errors (P_h, C_h) instead.")
            W_V[h], W_O[h] = V @ Bh, np.linalg.solve(Bh, W_O[h])
            continue
        nv = np.einsum("dk,dk->k", V, V)
        dot = V.T @ Vs  # (K fitted, K true)
        if kind == "monomial":
            scale = np.divide(dot, nv[:, None], out=np.zeros_like(dot), where=nv[:, None] > 0)
            cost = -scale * dot  # ‖s v − v*‖² − ‖v*‖² at the best scale s
        else:
            cost = nv[:, None] - 2 * (np.abs(dot) if odd else dot)
        rows_, cols = linear_sum_assignment(cost)
        perm = np.empty(true.head_dim, dtype=np.intp)
        perm[cols] = rows_
        if kind == "monomial":
            b = scale[perm, np.arange(true.head_dim)]
            b = np.where(b == 0, 1.0, b)
        else:
            b = np.where(odd & (dot[perm, np.arange(true.head_dim)] < 0), -1.0, 1.0)
        W_V[h] = V[:, perm] * b
        W_O[h] = W_O[h][perm] / b[:, None]
        if W_theta is not None and W_theta.ndim == 3:
            W_theta[h] = W_theta[h][:, perm]
    kw = dict(W_V=W_V, W_O=W_O, W_theta=W_theta,
              intercept=None if fit.intercept is None else fit.intercept.copy())
    if fit.qk == "factored":
        kw.update(W_Q=fit.W_Q[heads].copy(), W_K=fit.W_K[heads].copy())
    else:
        kw.update(P=fit.P[heads].copy())
    return AttentionLayer(**kw)


@dataclass
class EntryVoronoiLoss:
    """The per-entry Voronoi loss of :func:`entry_voronoi_loss`, labelled.

    Attributes
    ----------
    loss : float
    row, column : int
        The output entry.
    aligned_to_truth : bool
        Whether the fit was first aligned to the truth's gauge (:func:`align_layer`): an
        oracle that uses the truth, not a quantity a fit alone determines.
    label : str
        ``"entry_voronoi_loss"`` or ``"entry_voronoi_loss_aligned (uses the truth)"``.
    details : VoronoiDetails or None
        The per-entry loss's parts (``return_details=True``).
    """

    loss: float
    row: int
    column: int
    aligned_to_truth: bool
    label: str
    details: object = field(default=None, repr=False)

    def __float__(self):
        return float(self.loss)


def _check_entry(value, name, top):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or not 0 <= value < top:
        raise ValueError(f"{name} must be an integer in [0, {top}); got {value!r}.")
    return int(value)


def entry_voronoi_loss(layer, true_layer, row, column, *, gate=None, activation=None,
                       n_tokens=None, align=False, r=None, X=None, n_ref=DEFAULT_N_REF,
                       random_state=0, token_matching="auto", sign_symmetry="auto",
                       return_details=False):
    """The paper's Voronoi loss of output entry ``(row, column)``, both layers mapped to the
    entry's mixing measure.

    ``voronoi_loss(G, G*)`` (:func:`hmoe_estim.metrics.voronoi_loss`) with ``G`` and ``G*``
    the measures of the entry (:func:`~hmoe_estim.attention.attention_to_measure`: gate
    matrices from ``P_h`` and the row, experts the columns of ``W_V,h``, weights
    ``W_O,h[:, column]``). Raw, the loss sees the V/O gauge of MHA and G5 (a gauge-transformed
    copy of the truth has a loss > 0). With ``align=True`` the fit is first moved to the
    truth's gauge by :func:`align_layer`: an oracle alignment that uses the truth, flagged in
    the result (``aligned_to_truth``, ``label``).

    Parameters
    ----------
    layer : AttentionLayer or fitted AttentionLayerRegressor
    true_layer : AttentionLayer
        Same ``d`` and ``d_out`` (and ``H``, ``d_v`` with ``align=True``).
    row : int
        Output token in ``[0, N)``.
    column : int
        Output column in ``[0, d_out)``.
    gate : {"none", "value", "sdpa", "output"} or None
        With ``gate_form="activation"`` (the entries of other layers are no HMoE); ``None``:
        the estimator's.
    activation : str or None
        ``None``: the estimator's, else ``"sigmoid"``.
    n_tokens : int or None
        ``N`` (``None``: from ``X`` or the estimator's ``n_tokens_``).
    align : bool, default=False
    r, token_matching, sign_symmetry
        As in :func:`~hmoe_estim.metrics.voronoi_loss`.
    X : array-like of shape (n, N, d), optional
        Reference token matrices of the cells (``X.reshape(n, -1)`` is the measure's
        ``X_ref``). Default: ``n_ref`` matrices of i.i.d. standard normal tokens.
    n_ref : int, default=4096
    random_state : int, default=0
    return_details : bool, default=False
        Keep the per-entry :class:`~hmoe_estim.metrics.VoronoiDetails` in ``.details``.

    Returns
    -------
    EntryVoronoiLoss
        ``float(result)`` is the loss.

    Raises
    ------
    ValueError
        A gate without per-entry HMoE (``"key"``, ``"query"``, the multiplicative form),
        ``row`` or ``column`` out of range, layers that cannot be compared.
    """
    from ..metrics import voronoi_loss

    fit, est = _as_layer(layer, "layer")
    true = _truth(true_layer)
    gate, activation, gate_form, rows = _resolve_form(est, gate, activation, None, None)
    gate_form = check_form(fit, gate, activation, gate_form, rows)
    check_form(true, gate, activation, gate_form, rows)
    if gate not in ENTRY_GATES or gate_form != "activation":
        raise ValueError(
            f"an output entry is an HMoE (a mixing measure) for gate in {list(ENTRY_GATES)} "
            f"with gate_form='activation' only; got gate={gate!r}, gate_form={gate_form!r}. "
            "Use layer_parameter_errors or layer_regression_error for this layer.")
    _check_pair(fit, true)
    X = _reference(X, n_tokens, est, fit.d, n_ref, random_state)
    n, N, d = X.shape
    row = _check_entry(row, "row", N)
    column = _check_entry(column, "column", fit.d_out)
    if align:
        fit = align_layer(fit, true, gate=gate, activation=activation, gate_form=gate_form)
    details = voronoi_loss(fit.entry_measure(row, column, n_tokens=N),
                           true.entry_measure(row, column, n_tokens=N), gate=gate,
                           activation=activation, r=r, X_ref=X.reshape(n, N * d),
                           token_matching=token_matching, sign_symmetry=sign_symmetry,
                           return_details=True)
    label = "entry_voronoi_loss_aligned (uses the truth)" if align else "entry_voronoi_loss"
    return EntryVoronoiLoss(float(details.loss), row, column, bool(align), label,
                            details if return_details else None)


# -- scorers ------------------------------------------------------------------------------
_PARAMETER_METRICS = ("P_error", "VO_error", "P_relative_error", "VO_relative_error")
_RESERVED = ("gate", "activation", "gate_form", "return_details")


def _metric_function(metric):
    if metric in _PARAMETER_METRICS:
        return layer_parameter_errors
    return {"regression_error": layer_regression_error, "voronoi_loss": layer_voronoi_loss,
            "entry_voronoi_loss": entry_voronoi_loss}[metric]


class LayerMetricScorer:
    """Callable ``scorer(estimator, X, y=None) -> -metric(estimator, true_layer)``.

    The conventions of :class:`hmoe_estim.metrics.MetricScorer`: greater is better (the
    metric negated), picklable, ``gate``, ``activation`` and ``gate_form`` read from the
    fitted :class:`AttentionLayerRegressor`, ``X`` and ``y`` unused (the metrics are
    properties of the fitted weights, on a fixed reference sample).

    Parameters
    ----------
    metric : str
        One of ``LAYER_METRICS``: ``"regression_error"`` (:func:`layer_regression_error`),
        ``"P_error"``, ``"VO_error"``, ``"P_relative_error"``, ``"VO_relative_error"``
        (:func:`layer_parameter_errors`), ``"voronoi_loss"`` (:func:`layer_voronoi_loss`),
        ``"entry_voronoi_loss"`` (:func:`entry_voronoi_loss`; give ``row`` and ``column``).
    true_layer : AttentionLayer
    **kwargs
        Keyword arguments of the metric's function.

    Attributes
    ----------
    name : str
        The metric's name; ``"entry_voronoi_loss_aligned (uses the truth)"`` with
        ``align=True``.
    """

    def __init__(self, metric, true_layer, **kwargs):
        if not isinstance(metric, str) or metric not in LAYER_METRICS:
            raise ValueError(f"Unknown layer metric {metric!r}; use one of "
                             f"{list(LAYER_METRICS)}.")
        _truth(true_layer)
        bad = [k for k in _RESERVED if k in kwargs]
        if bad:
            raise ValueError(f"{bad} cannot be passed to a scorer: gate, activation and "
                             "gate_form are read from the fitted estimator, and a scorer "
                             "returns one number.")
        params = inspect.signature(_metric_function(metric)).parameters
        allowed = [p for p in params if p not in ("layer", "true_layer", *_RESERVED)]
        unknown = [k for k in kwargs if k not in allowed]
        if unknown:
            raise ValueError(f"{metric} takes no argument {unknown}; allowed: {allowed}.")
        if metric == "entry_voronoi_loss" and not {"row", "column"} <= set(kwargs):
            raise ValueError("the entry_voronoi_loss scorer needs the entry: give row=... "
                             "and column=...")
        self.metric = metric
        self.true_layer = true_layer
        self.kwargs = dict(kwargs)

    @property
    def name(self):
        if self.metric == "entry_voronoi_loss" and self.kwargs.get("align", False):
            return "entry_voronoi_loss_aligned (uses the truth)"
        return self.metric

    def __call__(self, estimator, X=None, y=None, **fit_params):
        est = estimator
        steps = getattr(estimator, "steps", None)
        if isinstance(steps, list) and steps:
            est = steps[-1][1]
        if isinstance(steps, list) and len(steps) > 1:
            raise ValueError("the layer metrics compare weights in the coordinates of the raw "
                             "tokens: score the AttentionLayerRegressor itself, not a "
                             "Pipeline with transformers before it.")
        if not isinstance(est, AttentionLayerRegressor):
            raise ValueError(f"a layer scorer needs an AttentionLayerRegressor; got "
                             f"{type(est).__name__}.")
        value = _metric_function(self.metric)(est, self.true_layer, **self.kwargs)
        if self.metric in _PARAMETER_METRICS:
            value = getattr(value, self.metric)
        return -float(value)

    def __repr__(self):
        kw = "".join(f", {k}={v!r}" for k, v in self.kwargs.items() if k != "X")
        if "X" in self.kwargs:
            kw += f", X=<array {np.shape(self.kwargs['X'])}>"
        return f"make_layer_scorer({self.metric!r}, <AttentionLayer>{kw})"


def make_layer_scorer(metric, true_layer, **kwargs):
    """A scikit-learn scorer of an :class:`AttentionLayerRegressor` against ``true_layer``.

    Parameters
    ----------
    metric : {"regression_error", "P_error", "VO_error", "P_relative_error", \
"VO_relative_error", "voronoi_loss", "entry_voronoi_loss"}
        See :class:`LayerMetricScorer`.
    true_layer : AttentionLayer
    **kwargs
        Passed to the metric's function (e.g. ``n_tokens``, ``n_ref``, ``r``, ``rows``;
        ``row``, ``column`` and ``align`` for ``"entry_voronoi_loss"``).

    Returns
    -------
    LayerMetricScorer
        ``scorer(estimator, X, y) -> -metric`` (greater is better); picklable.

    Raises
    ------
    ValueError
        Unknown metric, a keyword the metric does not take, ``gate``/``activation``/
        ``gate_form`` given. At scoring: an estimator that is not a fitted
        ``AttentionLayerRegressor``, or whatever the metric refuses.
    """
    return LayerMetricScorer(metric, true_layer, **kwargs)
