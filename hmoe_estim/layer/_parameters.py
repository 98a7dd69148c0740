"""The weights of a whole (gated) multi-head attention layer and their packed vector.

An :class:`AttentionLayer` holds, for ``H`` heads of width ``d_v`` on tokens of dimension
``d`` with ``d_out`` output columns (the conventions of
:func:`hmoe_estim.attention.multihead_attention`, where ``d_out = d``):

- the scores: ``W_Q, W_K`` of shape ``(H, d, d_v)`` (``qk="factored"``), or one free matrix
  ``P`` of shape ``(H, d, d)`` per head (``qk="full"``; ``P_h = W_Q,h W_K,hᵀ / sqrt(d_v)``,
  the gate matrix of the paper's Section 2);
- the values ``W_V`` of shape ``(H, d, d_v)`` and the output projection ``W_O`` of shape
  ``(H, d_v, d_out)`` (head blocks of the ``(H·d_v)×d_out`` matrix);
- optionally the multiplicative gate's ``W_θ`` (Qiu et al. 2025): ``(H, d)`` headwise, one
  factor ``φ(x_i·W_θ,h)`` per head and row, or ``(H, d, d_v)`` elementwise, one per head, row
  and channel;
- optionally an intercept ``b`` of shape ``(d_out,)``, added to every row.

:class:`LayerLayout` packs them into one vector, in the order of
``hmoe_estim.kernels.layer_offsets``::

    theta = [ W_Q | W_K | W_V | W_O | W_θ | b ]      (each row-major; P in place of W_Q, W_K)

Gauges (continuous reparametrisations that leave the layer's function unchanged):
``W_Q,h → W_Q,h A, W_K,h → W_K,h A⁻ᵀ`` when the scores are bilinear and factored; ``W_V,h →
W_V,h B, W_O,h → B⁻¹ W_O,h`` when nothing non-linear sits between them (MHA, G5, G3, G4, and
the headwise multiplicative gate); ``B`` diagonal only for the elementwise multiplicative gate.
So only ``P_h`` and ``C_h = W_V,h W_O,h`` are identified there (:attr:`AttentionLayer.P_`,
:attr:`AttentionLayer.VO_`).
"""

from dataclasses import dataclass

import numpy as np

from .._names import GATE_FORMS, GRANULARITIES, LAYER_GATES, QK_FORMS, ROWS

__all__ = ["AttentionLayer", "LayerLayout", "check_layer_gate", "check_choice", "check_form"]


def check_choice(value, name, choices, hint=""):
    """Return ``value`` if it is one of ``choices``, else raise a ``ValueError`` naming them."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"Unknown {name} {value!r}; use one of {list(choices)}{hint}.")
    return value


def check_layer_gate(gate):
    """Return ``gate`` if it names a gate position of a layer, else raise."""
    return check_choice(
        gate, "gate", LAYER_GATES,
        ": 'none' (MHA), 'value' (G2), 'sdpa' (G1), 'output' (G5), 'key' (G3) or "
        "'query' (G4)")


def _array(W, name, ndim):
    try:
        arr = np.array(W, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array; got {type(W).__name__}.") from exc
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array; got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values.")
    return arr


@dataclass(eq=False)
class AttentionLayer:
    """Weights of a (gated) multi-head attention layer (see the module docstring).

    Give either ``W_Q`` and ``W_K`` (factored scores) or ``P`` (full scores).
    """

    W_V: np.ndarray
    W_O: np.ndarray
    W_Q: np.ndarray = None
    W_K: np.ndarray = None
    P: np.ndarray = None
    W_theta: np.ndarray = None
    intercept: np.ndarray = None

    def __post_init__(self):
        self.W_V = _array(self.W_V, "W_V", 3)
        H, d, dv = self.W_V.shape
        if min(H, d, dv) < 1:
            raise ValueError(f"W_V must have shape (H, d, d_v) with H, d, d_v >= 1; got "
                             f"{self.W_V.shape}.")
        self.W_O = _array(self.W_O, "W_O", 3)
        if self.W_O.shape[:2] != (H, dv) or self.W_O.shape[2] < 1:
            raise ValueError(f"W_O must have shape (H, d_v, d_out) = ({H}, {dv}, d_out) like "
                             f"W_V; got {self.W_O.shape}.")
        factored = self.W_Q is not None or self.W_K is not None
        if factored == (self.P is not None) or (factored and (self.W_Q is None
                                                              or self.W_K is None)):
            raise ValueError("give either W_Q and W_K (qk='factored') or P (qk='full'), "
                             "not both and not neither.")
        if factored:
            self.W_Q = _array(self.W_Q, "W_Q", 3)
            self.W_K = _array(self.W_K, "W_K", 3)
            for name, W in (("W_Q", self.W_Q), ("W_K", self.W_K)):
                if W.shape != (H, d, dv):
                    raise ValueError(f"{name} must have shape (H, d, d_v) = {(H, d, dv)} like "
                                     f"W_V; got {W.shape}.")
            if dv > d:
                raise ValueError(
                    f"head_dim d_v = {dv} > d = {d} with factored scores: W_Q W_Kᵀ has rank "
                    "at most d, so the extra columns only add gauge directions; use "
                    "head_dim <= d or qk='full' (one d×d matrix P per head).")
        else:
            self.P = _array(self.P, "P", 3)
            if self.P.shape != (H, d, d):
                raise ValueError(f"P must have shape (H, d, d) = {(H, d, d)}; got "
                                 f"{self.P.shape}.")
        if self.W_theta is not None:
            self.W_theta = np.array(self.W_theta, dtype=np.float64)
            if self.W_theta.shape not in ((H, d), (H, d, dv)):
                raise ValueError(
                    f"W_theta must have shape (H, d) = {(H, d)} (headwise gate) or (H, d, d_v) "
                    f"= {(H, d, dv)} (elementwise gate); got {self.W_theta.shape}.")
            self.W_theta = _array(self.W_theta, "W_theta", self.W_theta.ndim)
        if self.intercept is not None:
            self.intercept = _array(self.intercept, "intercept", 1)
            if self.intercept.shape != (self.W_O.shape[2],):
                raise ValueError(f"intercept must have shape (d_out,) = "
                                 f"({self.W_O.shape[2]},); got {self.intercept.shape}.")

    # -- sizes and forms
    @property
    def n_heads(self):
        return self.W_V.shape[0]

    @property
    def d(self):
        return self.W_V.shape[1]

    @property
    def head_dim(self):
        return self.W_V.shape[2]

    @property
    def d_out(self):
        return self.W_O.shape[2]

    @property
    def qk(self):
        return "full" if self.P is not None else "factored"

    @property
    def granularity(self):
        """``None`` without a multiplicative gate, else ``"headwise"`` or ``"elementwise"``."""
        if self.W_theta is None:
            return None
        return "headwise" if self.W_theta.ndim == 2 else "elementwise"

    @property
    def fit_intercept(self):
        return self.intercept is not None

    # -- gauge-invariant quantities
    @property
    def P_(self):
        """``P_h = W_Q,h W_K,hᵀ / sqrt(d_v)``, shape ``(H, d, d)`` (``P`` itself when full)."""
        if self.P is not None:
            return self.P.copy()
        return np.einsum("hde,hfe->hdf", self.W_Q, self.W_K) / np.sqrt(self.head_dim)

    @property
    def VO_(self):
        """``C_h = W_V,h W_O,h``, shape ``(H, d, d_out)``."""
        return np.einsum("hde,hec->hdc", self.W_V, self.W_O)

    def entry_measure(self, row, column, *, n_tokens):
        """The mixing measure of output entry ``(row, column)`` on ``n_tokens`` tokens (an HMoE
        on ``vec(X)``, :func:`hmoe_estim.attention.attention_to_measure`): ``K = d_v``
        channels, weights ``W_O[:, :, column]``, gate matrices from ``P_h`` (factored or
        full). Only meaningful for the gates whose entries are HMoEs (none, value, sdpa,
        output, with φ on the signal); the callers check that."""
        from ..attention import attention_to_measure
        from ..model import MixingMeasure

        H, d, dv = self.n_heads, self.d, self.head_dim
        # attention_to_measure reads omega = W_O[:, :, column] of a d×d layer: the column
        # goes to column 0 of a (H, d_v, d) W_O
        W_O = np.zeros((H, dv, d))
        W_O[:, :, 0] = self.W_O[:, :, column]
        if self.qk == "factored":
            return attention_to_measure(self.W_Q, self.W_K, self.W_V, W_O, n_tokens=n_tokens,
                                        row=row, column=0)
        # full scores: experts and weights from any W_Q, W_K, the gate matrices from P
        # (J_rowᵀ P_h J_j, symmetrised, as attention_to_measure builds them)
        zero = np.zeros((H, d, dv))
        G = attention_to_measure(zero, zero, self.W_V, W_O, n_tokens=n_tokens, row=row,
                                 column=0)
        D = n_tokens * d
        M = np.zeros((H, n_tokens, D, D))
        rs = slice(row * d, (row + 1) * d)
        for j in range(n_tokens):
            M[:, j, rs, j * d:(j + 1) * d] = self.P
        M = 0.5 * (M + np.swapaxes(M, 2, 3))
        return MixingMeasure(G.omega, M, G.a).normalized()

    @property
    def layout(self):
        """The :class:`LayerLayout` of this layer."""
        return LayerLayout(self.n_heads, self.d, self.head_dim, self.d_out, qk=self.qk,
                           granularity=self.granularity, fit_intercept=self.fit_intercept)


@dataclass(frozen=True)
class LayerLayout:
    """Sizes and forms of a layer, and its packed parameter vector (module docstring)."""

    n_heads: int
    d: int
    head_dim: int
    d_out: int
    qk: str = "factored"
    granularity: str = None
    fit_intercept: bool = False

    def __post_init__(self):
        for name in ("n_heads", "d", "head_dim", "d_out"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1; got {v!r}.")
        check_choice(self.qk, "qk", QK_FORMS)
        if self.granularity is not None:
            check_choice(self.granularity, "granularity", GRANULARITIES)
        if self.qk == "factored" and self.head_dim > self.d:
            raise ValueError(
                f"head_dim = {self.head_dim} > d = {self.d} with qk='factored': W_Q W_Kᵀ has "
                "rank at most d, so the extra columns only add gauge directions; use "
                "head_dim <= d or qk='full'.")

    @property
    def theta_kind(self):
        return {None: 0, "headwise": 1, "elementwise": 2}[self.granularity]

    def offsets(self):
        """``(oK, oV, oO, oT, oB, P)`` of ``hmoe_estim.kernels.layer_offsets``."""
        from ..kernels import layer_offsets

        f = getattr(layer_offsets, "py_func", layer_offsets)
        return f(self.n_heads, self.d, self.head_dim, self.d_out, self.qk == "full",
                 self.theta_kind, self.fit_intercept)

    @property
    def n_params(self):
        return int(self.offsets()[5])

    def pack(self, layer):
        """``theta`` of ``layer`` (whose layout must be this one)."""
        if layer.layout != self:
            raise ValueError(f"the layer's layout {layer.layout} is not {self}.")
        parts = [layer.W_Q, layer.W_K] if self.qk == "factored" else [layer.P]
        parts += [layer.W_V, layer.W_O]
        if layer.W_theta is not None:
            parts.append(layer.W_theta)
        if layer.intercept is not None:
            parts.append(layer.intercept)
        return np.concatenate([np.ravel(p) for p in parts])

    def unpack(self, theta):
        """The :class:`AttentionLayer` of the vector ``theta`` (copies)."""
        theta = np.asarray(theta, dtype=np.float64)
        oK, oV, oO, oT, oB, P = self.offsets()
        if theta.shape != (P,):
            raise ValueError(f"theta must have shape ({P},) for {self}; got {theta.shape}.")
        H, d, dv, dout = self.n_heads, self.d, self.head_dim, self.d_out
        kw = {}
        if self.qk == "factored":
            kw["W_Q"] = theta[:oK].reshape(H, d, dv).copy()
            kw["W_K"] = theta[oK:oV].reshape(H, d, dv).copy()
        else:
            kw["P"] = theta[:oV].reshape(H, d, d).copy()
        kw["W_V"] = theta[oV:oO].reshape(H, d, dv).copy()
        kw["W_O"] = theta[oO:oT].reshape(H, dv, dout).copy()
        if self.granularity == "headwise":
            kw["W_theta"] = theta[oT:oB].reshape(H, d).copy()
        elif self.granularity == "elementwise":
            kw["W_theta"] = theta[oT:oB].reshape(H, d, dv).copy()
        if self.fit_intercept:
            kw["intercept"] = theta[oB:P].copy()
        return AttentionLayer(**kw)

    def kernel_args(self, gate, activation, rows):
        """The trailing arguments of ``hmoe_estim.kernels.layer_values`` (and of
        ``hmoe_estim.kernels.LayerPasses``) for this layout, gate, activation and rows."""
        from .._names import ACTIVATION_CODES, LAYER_GATE_CODES

        return (self.n_heads, self.head_dim, self.d_out, self.qk == "full",
                LAYER_GATE_CODES[gate], ACTIVATION_CODES[activation], self.theta_kind,
                self.fit_intercept, rows == "last")


def check_form(layer_or_layout, gate, activation, gate_form, rows):
    """Validate the names and their combination with the layer; return ``gate_form``
    (``None`` is read off the layer: multiplicative when it has ``W_θ``)."""
    from .._validation import check_activation

    check_layer_gate(gate)
    check_activation(activation)
    check_choice(rows, "rows", ROWS, " ('all': every row of the output, 'last': the last one)")
    granularity = layer_or_layout.granularity
    if gate_form is None:
        gate_form = "activation" if granularity is None else "multiplicative"
    check_choice(gate_form, "gate_form", GATE_FORMS)
    if gate_form == "multiplicative":
        if gate != "sdpa":
            raise ValueError(
                f"gate_form='multiplicative' is the gate of the SDPA output (G1) of Qiu et al. "
                f"(2025); got gate={gate!r}: use gate='sdpa' or gate_form='activation'.")
        if granularity is None:
            raise ValueError("gate_form='multiplicative' needs the gate's weights W_theta "
                             "(shape (H, d) headwise or (H, d, d_v) elementwise); the layer "
                             "has none.")
    elif granularity is not None:
        raise ValueError("the layer has multiplicative-gate weights W_theta: use "
                         "gate_form='multiplicative' (with gate='sdpa'), or drop W_theta.")
    if layer_or_layout.qk == "full" and gate in ("key", "query"):
        raise ValueError(
            f"qk='full' needs bilinear scores; gate={gate!r} applies φ to the "
            f"{gate} projection, so the scores are not x_iᵀ P x_j: use qk='factored'.")
    return gate_form
