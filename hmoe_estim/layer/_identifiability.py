"""Which weights of an attention layer a fit can identify: gauges, discrete symmetries,
obstructions, and a check against the Jacobian at the truth.

A layer's output (:func:`attention_layer_output`) is unchanged along continuous
reparametrisations of its weights, the **gauges**, per head ``h``:

- the Q/K gauge ``W_Q,h → W_Q,h A, W_K,h → W_K,h A⁻ᵀ`` (``A ∈ GL(d_v)``, dimension
  ``d_v²``) when the scores ``x_iᵀ W_Q,h W_K,hᵀ x_j / sqrt(d_v)`` are bilinear and factored
  (MHA, G1, G2, G5, the multiplicative gate). G3 and G4 put ``φ`` on one side of the product,
  ``Σ_e (q_e·x_i) φ(k_e·x_j)``: no ``A`` but a permutation (with sign flips where ``φ`` allows
  them) commutes with ``φ``, so no continuous Q/K gauge survives. With ``qk="full"`` the
  matrix ``P_h`` is free: no gauge;
- the V/O gauge ``W_V,h → W_V,h B, W_O,h → B⁻¹ W_O,h``: ``B ∈ GL(d_v)`` (``d_v²``) when nothing
  non-linear sits between ``W_V`` and ``W_O`` (MHA, G5, G3, G4, the headwise multiplicative
  gate of Qiu et al. 2025, whose one factor per head and row commutes with ``B``); ``B``
  diagonal (``d_v``) for the elementwise multiplicative gate (one factor per channel); none for
  G1 and G2 in the activation form (``φ`` acts channel by channel, and only permutations and
  sign flips commute with it).

So the null space of the Jacobian ``J[t, p] = ∂f_t/∂θ_p`` of the outputs at the truth
contains the tangent of the gauges' orbits, of dimension ``Σ_h (Q/K + V/O)``; an intercept adds
no direction (no head output is constant in the tokens), nor does reading the last row only.
Per head, when ``W_Q,h``, ``W_K,h``, ``W_V,h`` and ``W_O,h`` have rank ``d_v`` (which needs
``d_v <= min(d, d_out)``):

================= ======================== ===================== =============
gate (paper)      form                     ``qk="factored"``     ``qk="full"``
================= ======================== ===================== =============
``none`` (MHA)    activation               ``2 d_v²``            ``d_v²``
``output`` (G5)   activation               ``2 d_v²``            ``d_v²``
``value`` (G2)    activation               ``d_v²`` (Q/K)        0
``sdpa`` (G1)     activation               ``d_v²`` (Q/K)        0
``key`` (G3)      activation               ``d_v²`` (V/O)        —
``query`` (G4)    activation               ``d_v²`` (V/O)        —
``sdpa``          multiplicative headwise  ``2 d_v²``            ``d_v²``
``sdpa``          multiplicative elementw. ``d_v² + d_v``        ``d_v``
================= ======================== ===================== =============

A ``GL(d_v)`` orbit through factors ``L, R`` of ranks ``ρ_L, ρ_R`` has dimension
``d_v² − (d_v − ρ_L)(d_v − ρ_R)`` (the stabiliser), and the factorisation ``L Rᵀ`` (``n_L ×
d_v`` by ``n_R × d_v``) has ``(n_L − ρ_L)(d_v − ρ_R) + (n_R − ρ_R)(d_v − ρ_L)`` null directions
beyond it: 0 at full rank, more when a factor loses rank (a degenerate truth, or
``d_out < d_v``). With full scores and ``d_v > d = d_out`` the orbit itself shrinks to
``d_v² − (d_v − d)²`` and nothing lies beyond it.

The **discrete symmetries** (relabelling heads, permuting and flipping channels where ``φ``
allows it) leave the null space alone. An **obstruction** is a reason the weights are not
identified even up to these: a fitted ``head_dim`` above the truth's (extra channels are null
or split a true one), or a degenerate truth — rank-deficient ``P_h`` or ``C_h = W_V,h W_O,h``,
a zero or duplicated channel, a head whose output does not depend on the tokens, two equal
heads. Each obstruction states how many null directions it adds to ``J`` at the truth where
that number is known.

The verdict is a first-order reading: *identifiable up to the gauges* when no obstruction
applies and the numerical null space of ``J`` on reference tokens has exactly the gauges'
dimension (locally identifiable up to the gauges and the discrete symmetries; a global
argument is not part of the check); *not identifiable* when an obstruction applies or ``J`` has
more null directions than predicted; *unknown* when ``J`` has fewer (the prediction does not
hold at this truth) or no clear gap. The per-entry counterpart is
:func:`hmoe_estim.metrics.identifiability_report`.
"""

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from .._names import GRANULARITIES, LAYER_GATE_LABELS, ODD_ACTIVATIONS, QK_FORMS
from .._validation import check_count
from ..metrics import PHI_AT_ZERO, Symmetry
from ._forward import attention_layer_output, check_tokens
from ._parameters import AttentionLayer, check_choice, check_form, check_layer_gate

__all__ = [
    "Gauge",
    "LayerObstruction",
    "LayerJacobianCheck",
    "LayerIdentifiabilityReport",
    "layer_identifiability_report",
    "layer_verdict_label",
]

#: Gates whose scores are bilinear in the tokens (``x_iᵀ P_h x_j``).
_BILINEAR = ("none", "value", "sdpa", "output")
#: Relative size below which a vector or a singular value counts as zero.
_ZERO = 1e-10


@dataclass
class Gauge:
    """A continuous reparametrisation of every head that leaves the layer's output unchanged.

    Attributes
    ----------
    name : str
        ``"qk"`` or ``"vo"``.
    description : str
    group : str
        ``"GL(d_v)"`` or ``"diagonal"`` (invertible diagonal matrices), acting on each head.
    dimension : int
        Of the orbit through the truth, over all heads (``d_v²`` per head for ``GL(d_v)`` at
        full rank).
    """

    name: str
    description: str
    group: str
    dimension: int

    def to_dict(self):
        """JSON-safe form."""
        return {"name": self.name, "description": self.description, "group": self.group,
                "dimension": int(self.dimension)}


@dataclass
class LayerObstruction:
    """A reason the weights are not identified up to the gauges and discrete symmetries.

    Attributes
    ----------
    name : str
        ``"over-specified"``, ``"rank-deficient-P"``, ``"rank-deficient-C"``,
        ``"zero-channel"``, ``"duplicate-channel"``, ``"zero-score-channel"``, ``"constant-head"``
        or ``"duplicate-heads"``.
    description : str
        In plain words: what happens and what remains identified.
    extra_null_dimension : int or None
        Null directions it adds to the Jacobian at the truth (of the truth's ``head_dim``)
        beyond the gauges' orbits; 0 for ``"over-specified"``, which concerns the fitted
        class; ``None`` where not derived.
    heads : tuple of int
        The heads concerned (empty when all are).
    """

    name: str
    description: str
    extra_null_dimension: object = None
    heads: tuple = ()

    def to_dict(self):
        """JSON-safe form."""
        e = self.extra_null_dimension
        return {"name": self.name, "description": self.description,
                "extra_null_dimension": None if e is None else int(e),
                "heads": [int(h) for h in self.heads]}


@dataclass
class LayerJacobianCheck:
    """Spectrum of the layer's Jacobian at the truth on reference tokens.

    Attributes
    ----------
    n_params : int
        Columns of ``J``: the packed parameters of the truth's layout
        (:class:`LayerLayout`).
    n_rows : int
        Rows of ``J``: reference samples × rows read × ``d_out``.
    singular_values : ndarray
        Of ``J / sqrt(n_rows)``, decreasing.
    null_dimension : int
        Singular values below ``tol`` times the largest.
    predicted_null_dimension : int
        Gauges' dimension plus the known ``extra_null_dimension`` of the obstructions.
    complete : bool
        Every obstruction's extra dimension is known (else the prediction is a lower bound).
    tol : float
    gap : float
        Smallest kept over largest dropped singular value (``inf`` when none is dropped).
    """

    n_params: int
    n_rows: int
    singular_values: np.ndarray
    null_dimension: int
    predicted_null_dimension: int
    complete: bool
    tol: float
    gap: float

    @property
    def matches(self):
        """Whether the numerical null space has exactly the predicted dimension."""
        return bool(self.null_dimension == self.predicted_null_dimension)

    def to_dict(self):
        """JSON-safe form."""
        s = self.singular_values
        return {"n_params": int(self.n_params), "n_rows": int(self.n_rows),
                "null_dimension": int(self.null_dimension),
                "predicted_null_dimension": int(self.predicted_null_dimension),
                "complete": bool(self.complete), "matches": self.matches,
                "tol": float(self.tol),
                "gap": float(self.gap) if np.isfinite(self.gap) else None,
                "largest_singular_value": float(s[0]) if s.size else None,
                "smallest_singular_value": float(s[-1]) if s.size else None}


@dataclass
class LayerIdentifiabilityReport:
    """Result of :func:`layer_identifiability_report` (``str(report)`` is its summary).

    Attributes
    ----------
    gate, activation, gate_form, qk, rows : str
    granularity : str or None
        Of the multiplicative gate.
    true_shape : tuple
        ``(H, d, d_v*, d_out)`` of the truth.
    head_dim : int
        Fitted ``d_v``.
    n_tokens : int
    fit_intercept : bool
    identifiable : bool or "unknown"
        See ``verdict``.
    reason : str
    gauges : list of Gauge
        At the truth's ``head_dim``.
    symmetries : list of Symmetry
        Discrete symmetries (:class:`hmoe_estim.metrics.Symmetry`).
    obstructions : list of LayerObstruction
    identified : list of str
        What a fit identifies (up to the discrete symmetries).
    jacobian : LayerJacobianCheck
    notes : list of str
        Facts that do not decide the verdict.
    """

    gate: str
    activation: str
    gate_form: str
    granularity: object
    qk: str
    rows: str
    true_shape: tuple
    head_dim: int
    n_tokens: int
    fit_intercept: bool
    identifiable: object
    reason: str
    gauges: list
    symmetries: list
    obstructions: list
    identified: list
    jacobian: LayerJacobianCheck
    notes: list = field(default_factory=list)

    @property
    def gauge_dimension(self):
        """Sum of the gauges' dimensions."""
        return int(sum(g.dimension for g in self.gauges))

    @property
    def verdict(self):
        """``"identifiable up to the gauges"``, ``"not identifiable"`` or ``"unknown"``."""
        if self.identifiable is True:
            return "identifiable up to the gauges"
        if self.identifiable is False:
            return "not identifiable"
        return "unknown"

    def summary(self):
        """A few lines of plain text."""
        H, d, dvs, dout = self.true_shape
        form = self.gate_form if self.granularity is None else (
            f"{self.gate_form} {self.granularity}")
        lines = [
            f"{LAYER_GATE_LABELS[self.gate]} ({self.gate}, {form}), {self.activation}, "
            f"qk={self.qk}, rows={self.rows}: head_dim {self.head_dim} fitted to d_v* = {dvs} "
            f"(H = {H}, d = {d}, d_out = {dout}, N = {self.n_tokens}"
            + (", intercept" if self.fit_intercept else "") + f"): {self.verdict}",
            f"  reason: {self.reason}",
        ]
        for g in self.gauges:
            lines.append(f"  gauge {g.name} ({g.group} per head, dimension {g.dimension}): "
                         f"{g.description}")
        if not self.gauges:
            lines.append("  gauges: none")
        for s in self.symmetries:
            lines.append(f"  symmetry {s.name}: {s.description}")
        for o in self.obstructions:
            extra = ("" if o.extra_null_dimension is None
                     else f" (+{o.extra_null_dimension} null directions)")
            lines.append(f"  obstruction {o.name}{extra}: {o.description}")
        lines.append("  identified: " + "; ".join(self.identified))
        j = self.jacobian
        gap = f"{j.gap:.1e}" if np.isfinite(j.gap) else "inf"
        lines.append(
            f"  Jacobian at the truth: {j.n_params} parameters, {j.n_rows} rows, null space "
            f"{j.null_dimension}, predicted {j.predicted_null_dimension}"
            + ("" if j.complete else " (a lower bound)")
            + f" ({'matches' if j.matches else 'does not match'}; gap {gap})")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self):
        return self.summary()

    def to_dict(self):
        """JSON-safe form."""
        return {"gate": self.gate, "activation": self.activation, "gate_form": self.gate_form,
                "granularity": self.granularity, "qk": self.qk, "rows": self.rows,
                "true_shape": list(self.true_shape), "head_dim": int(self.head_dim),
                "n_tokens": int(self.n_tokens), "fit_intercept": bool(self.fit_intercept),
                "identifiable": self.identifiable, "verdict": self.verdict,
                "reason": self.reason, "gauge_dimension": self.gauge_dimension,
                "gauges": [g.to_dict() for g in self.gauges],
                "symmetries": [s.name for s in self.symmetries],
                "obstructions": [o.to_dict() for o in self.obstructions],
                "identified": list(self.identified), "jacobian": self.jacobian.to_dict(),
                "notes": list(self.notes)}


def layer_verdict_label(record):
    """Short text of a layer verdict: ``"identifiable up to the gauges"``, ``"not identifiable
    (over-specified, rank-deficient-P)"`` or ``"identifiability unknown"``.

    ``record`` is a :class:`LayerIdentifiabilityReport` or its ``to_dict()``.
    """
    if isinstance(record, LayerIdentifiabilityReport):
        record = record.to_dict()
    v = record.get("verdict")
    if v == "not identifiable":
        names = list(dict.fromkeys(o["name"] for o in record.get("obstructions", [])))
        if not names:
            names = ["null directions beyond the gauges"]
        return "not identifiable (" + ", ".join(names) + ")"
    if v == "identifiable up to the gauges":
        return v
    return "identifiability unknown"


# -- gauges and symmetries ------------------------------------------------------------------
def _vo_group(gate, granularity):
    """``"GL(d_v)"``, ``"diagonal"`` or ``None``: the V/O gauge group of a form."""
    if granularity == "elementwise":
        return "diagonal"
    if granularity == "headwise" or gate in ("none", "output", "key", "query"):
        return "GL(d_v)"
    return None


def _orbit(dv, rho_left, rho_right):
    """Dimension of the ``GL(d_v)`` orbit of ``(L, R)`` under ``L → L A, R → R A⁻ᵀ`` (ranks
    ``rho_left``, ``rho_right``): ``d_v²`` minus the stabiliser's ``(d_v − ρ_L)(d_v − ρ_R)``."""
    return dv * dv - (dv - rho_left) * (dv - rho_right)


def _head_ranks(layer):
    """Per head: ranks of ``W_Q,h``, ``W_K,h`` (``None`` with full scores), ``W_V,h``,
    ``W_O,h``, and the value channels that are zero in both ``W_V,h`` and ``W_O,h``."""
    def ranks(W):
        scale = float(np.max(np.abs(W)))
        return [_rank(W[h], scale) for h in range(layer.n_heads)]

    out = {"V": ranks(layer.W_V), "O": ranks(layer.W_O)}
    out["Q"] = ranks(layer.W_Q) if layer.qk == "factored" else None
    out["K"] = ranks(layer.W_K) if layer.qk == "factored" else None
    out["dead"] = [sum(_is_zero(layer.W_V[h, :, e], layer.W_V)
                       and _is_zero(layer.W_O[h, e], layer.W_O) for e in range(layer.head_dim))
                   for h in range(layer.n_heads)]
    return out


def _gauges(gate, granularity, qk, dv, ranks):
    """The gauges, each with the dimension of its orbit through the truth (``d_v²`` per head
    for a full-rank truth), and the per-head total."""
    H = len(ranks["V"])
    out, per_head = [], np.zeros(H, dtype=int)
    if qk == "factored" and gate in _BILINEAR:
        dims = [_orbit(dv, q, k) for q, k in zip(ranks["Q"], ranks["K"])]
        per_head += dims
        out.append(Gauge(
            "qk", "W_Q,h → W_Q,h A, W_K,h → W_K,h A⁻ᵀ leaves P_h = W_Q,h W_K,hᵀ/√d_v and so "
            "the bilinear scores unchanged (both components of GL(d_v): channel permutations "
            "and sign flips are part of it)", "GL(d_v)", int(sum(dims))))
    group = _vo_group(gate, granularity)
    if group == "GL(d_v)":
        dims = [_orbit(dv, v, o) for v, o in zip(ranks["V"], ranks["O"])]
        per_head += dims
        why = {"output": "G5 applies φ after W_O", "key": "G3 applies φ to the keys only",
               "query": "G4 applies φ to the queries only",
               "none": "nothing sits between W_V and W_O"}.get(
            gate, "the headwise factor φ(x_i·W_θ,h) is one scalar per head and row")
        out.append(Gauge("vo", f"W_V,h → W_V,h B, W_O,h → B⁻¹ W_O,h leaves C_h = W_V,h W_O,h "
                         f"unchanged ({why})", group, int(sum(dims))))
    elif group == "diagonal":
        dims = [dv - dead for dead in ranks["dead"]]
        per_head += dims
        out.append(Gauge("vo", "W_V,h[:, e] → c_e W_V,h[:, e], W_O,h[e, :] → W_O,h[e, :]/c_e: "
                         "the elementwise factor φ(x_i·W_θ,h[:, e]) commutes with one scale per "
                         "channel only", group, int(sum(dims))))
    return out, per_head


def _symmetries(gate, activation, granularity, qk, H, dv, intercept):
    out = []
    if H >= 2:
        out.append(Symmetry("head-relabelling", f"permuting the heads ({H}! = "
                            f"{math.factorial(H)} relabellings)"))
    odd = activation in ODD_ACTIVATIONS
    if gate in ("key", "query"):
        out.append(Symmetry("score-channel-permutation", "permuting the columns of W_Q,h and "
                            f"W_K,h together ({dv}! per head)"))
        if odd or (gate == "key" and activation == "sigmoid"):
            why = ("φ odd" if odd else "σ(−z) = 1 − σ(z), and Σ_e (q_e·x_i) is the same for "
                   "every key, so the softmax drops it")
            out.append(Symmetry("score-sign-flip", "(W_Q,h[:, e], W_K,h[:, e]) → (−W_Q,h[:, e], "
                                f"−W_K,h[:, e]) ({why})"))
    if granularity is None and gate in ("value", "sdpa"):
        out.append(Symmetry("channel-permutation", "permuting the columns of W_V,h with the rows "
                            f"of W_O,h ({dv}! per head)"))
        if odd:
            out.append(Symmetry("channel-sign-flip", "(W_V,h[:, e], W_O,h[e, :]) → "
                                "(−W_V,h[:, e], −W_O,h[e, :]) (φ odd)"))
        elif activation == "sigmoid" and intercept:
            why = " and the rows of the softmax sum to 1" if gate == "value" else ""
            out.append(Symmetry("channel-reflection", "(W_V,h[:, e], W_O,h[e, :], b) → "
                                "(−W_V,h[:, e], −W_O,h[e, :], b + W_O,h[e, :]): σ(−z) = 1 − σ(z)"
                                + why))
    if granularity == "elementwise":
        out.append(Symmetry("channel-permutation", "permuting the columns of W_V,h and W_θ,h "
                            f"with the rows of W_O,h ({dv}! per head; the signs of B are in the "
                            "diagonal gauge)"))
    if granularity is not None and odd:
        what = "W_θ,h[:, e], W_O,h[e, :]" if granularity == "elementwise" else "W_θ,h, W_O,h"
        out.append(Symmetry("gate-sign-flip", f"({what}) → their negatives (φ odd)"))
    return out


# -- obstructions ---------------------------------------------------------------------------
def _rank(M, scale):
    s = np.linalg.svd(M, compute_uv=False)
    return int(np.sum(s > _ZERO * scale)) if scale > 0 else 0


def _beyond_orbit(n_left, n_right, dv, rho_left, rho_right):
    """Null directions of the differential of ``(L, R) ↦ L Rᵀ`` (``L`` ``n_left × d_v``, ``R``
    ``n_right × d_v``, ranks ``ρ_L``, ``ρ_R``) beyond the tangent of the ``GL(d_v)`` orbit:
    ``(n_left − ρ_L)(d_v − ρ_R) + (n_right − ρ_R)(d_v − ρ_L)`` (the differential's kernel has
    dimension ``d_v (n_left + n_right) − n_left ρ_R − n_right ρ_L + ρ_L ρ_R``)."""
    return (n_left - rho_left) * (dv - rho_right) + (n_right - rho_right) * (dv - rho_left)


def _head_outputs(layer, gate, activation, gate_form, rows, X):
    """Each head's contribution to the output (before G5's φ, without the intercept), one row
    per sample and row read."""
    inner = "none" if gate == "output" else gate
    out = []
    for h in range(layer.n_heads):
        kw = {"W_V": layer.W_V[h:h + 1], "W_O": layer.W_O[h:h + 1]}
        if layer.qk == "full":
            kw["P"] = layer.P[h:h + 1]
        else:
            kw["W_Q"], kw["W_K"] = layer.W_Q[h:h + 1], layer.W_K[h:h + 1]
        if layer.W_theta is not None:
            kw["W_theta"] = layer.W_theta[h:h + 1]
        y = attention_layer_output(X, AttentionLayer(**kw), gate=inner, activation=activation,
                                   gate_form=gate_form, rows=rows)
        out.append(y.reshape(-1, layer.d_out))
    return out


def _obstructions(layer, gate, activation, granularity, head_dim, ranks, per_head, gauge_head,
                  heads_out):
    """Obstructions of the truth ``layer`` fitted with ``head_dim`` channels (``ranks`` of
    :func:`_head_ranks`, ``per_head`` parameters and ``gauge_head[h]`` gauge dimensions)."""
    H, d, dv, dout = layer.n_heads, layer.d, layer.head_dim, layer.d_out
    out = []
    vo = _vo_group(gate, granularity)
    if head_dim > dv:
        if vo == "GL(d_v)" or (gate in _BILINEAR and layer.qk == "factored"):
            kept = [q for q, ok in (("P_h", gate in _BILINEAR), ("C_h", vo == "GL(d_v)")) if ok]
            what = (" and ".join(kept) + (" remain" if len(kept) > 1 else " remains")
                    + " identified (the fibre of the factorisation is larger than the GL(d_v) "
                    "orbits there)")
        else:
            what = "P_h remains identified" if gate in _BILINEAR else "C_h remains identified"
        out.append(LayerObstruction(
            "over-specified",
            f"head_dim = {head_dim} > d_v* = {dv}: the {head_dim - dv} extra channel(s) per head "
            "can be null (e.g. W_O,h[e, :] = 0 with any W_V,h[:, e], W_Q,h[:, e] = 0 with any "
            "W_K,h[:, e]) or split a true channel between copies, so the channels are not "
            f"identified; {what}. The Jacobian check is at the truth's head_dim", 0))

    if layer.qk == "factored" and gate in _BILINEAR:
        for h, (rq, rk) in enumerate(zip(ranks["Q"], ranks["K"])):
            extra = _beyond_orbit(d, d, dv, rq, rk)
            if extra:
                out.append(LayerObstruction(
                    "rank-deficient-P",
                    f"head {h}: rank W_Q,h = {rq}, rank W_K,h = {rk} < d_v = {dv}, so P_h has "
                    f"rank < d_v and W_Q,h, W_K,h move along more than the Q/K gauge (a null "
                    f"or split score channel); P_h itself remains identified", extra, (h,)))
    if gate in ("key", "query"):
        for h in range(H):
            for e in range(dv):
                q0 = _is_zero(layer.W_Q[h, :, e], layer.W_Q)
                k0 = _is_zero(layer.W_K[h, :, e], layer.W_K)
                if not (q0 or k0):
                    continue
                if gate == "key":  # q_e·x_i φ(k_e·x_j): k_e = 0 leaves a term constant in j
                    extra = d * (int(q0) + int(k0)) if q0 and k0 else d
                else:  # φ(q_e·x_i) k_e·x_j: q_e = 0 leaves φ(0) k_e·x_j
                    free_k = q0 and PHI_AT_ZERO[activation] == 0.0
                    extra = d * (int(k0) + int(free_k)) if q0 else d
                if extra == 0:  # σ(0) k_e·x_j: a linear score channel, identified
                    continue
                out.append(LayerObstruction(
                    "zero-score-channel",
                    f"head {h}, score channel {e}: "
                    + ("W_Q,h[:, e] = 0" if q0 else "") + (" and " if q0 and k0 else "")
                    + ("W_K,h[:, e] = 0" if k0 else "")
                    + ": the channel adds nothing that depends on the key, so its other "
                    "weights are free", extra, (h,)))
    if vo == "GL(d_v)":
        for h, (rv, ro) in enumerate(zip(ranks["V"], ranks["O"])):
            extra = _beyond_orbit(d, dout, dv, rv, ro)
            if extra:
                why = f" (d_out = {dout} < d_v)" if dout < dv else ""
                out.append(LayerObstruction(
                    "rank-deficient-C",
                    f"head {h}: rank W_V,h = {rv}, rank W_O,h = {ro} < d_v = {dv}{why}, so "
                    "C_h = W_V,h W_O,h has rank < d_v and W_V,h, W_O,h move along more than "
                    "the V/O gauge; C_h itself remains identified", extra, (h,)))
    else:
        out += _channel_obstructions(layer, gate, activation, granularity)

    # function level: heads that add nothing that depends on the tokens, equal heads
    norms = [float(np.linalg.norm(c)) for c in heads_out]
    top = max(norms)
    inert = [h for h in range(H) if np.linalg.norm(heads_out[h] - heads_out[h].mean(axis=0))
             <= _ZERO * top or top == 0.0]
    for h in inert:
        extra = None
        if _is_zero(layer.W_O[h], layer.W_O) and ranks["V"][h] == dv:
            # W_O,h = 0: only W_O,h moves the output (d_v d_out directions); it subsumes the
            # head's other obstructions
            out = [o for o in out if o.heads != (h,)]
            extra = per_head - dv * dout - int(gauge_head[h])
        out.append(LayerObstruction(
            "constant-head", f"head {h} adds nothing that depends on the tokens (zero or a "
            "constant on the reference tokens): its scores (P_h) and most of its other weights "
            "are not identified", extra, (h,)))
    groups, seen = [], set()
    for h in range(H):
        if h in inert or h in seen:
            continue
        same = [g for g in range(h + 1, H) if g not in inert and np.linalg.norm(
            heads_out[g] - heads_out[h]) <= 1e-8 * norms[h]]
        if same:
            seen.update(same)
            groups.append([h] + same)
    for grp in groups:
        extra = (len(grp) - 1) * (per_head - int(gauge_head[grp[0]]))
        out.append(LayerObstruction(
            "duplicate-heads", f"heads {grp} have the same output: only their sum is "
            "identified, so one head's weights can move against another's; the layer's "
            "function is identified, the heads are not", extra, tuple(grp)))
    return out


def _is_zero(v, ref):
    """Whether ``v`` is 0 relative to the largest entry of ``ref``."""
    return float(np.linalg.norm(v)) <= _ZERO * float(np.max(np.abs(ref)))


def _channel_obstructions(layer, gate, activation, granularity):
    """Zero and duplicate value channels of G1, G2 and the elementwise multiplicative gate."""
    H, d, dv, dout = layer.n_heads, layer.d, layer.head_dim, layer.d_out
    out = []
    phi0 = PHI_AT_ZERO[activation] == 0.0
    for h in range(H):
        for e in range(dv):
            v0 = _is_zero(layer.W_V[h, :, e], layer.W_V)
            o0 = _is_zero(layer.W_O[h, e], layer.W_O)
            if not (v0 or o0):
                continue
            if granularity == "elementwise":
                # (S X w_e) φ(x_i·θ_e) o_e: o_e = 0 frees w_e and θ_e, w_e = 0 frees θ_e and
                # o_e; the channel's scale gauge lies in that span (its orbit is a point when
                # both are 0)
                extra = d * int(o0) + d + dout * int(v0) - (0 if v0 and o0 else 1)
            else:
                const = phi0 or layer.fit_intercept  # φ(0)·o_e is 0 or absorbed by b
                extra = d * int(o0) + (dout if v0 and const else 0)
            if extra == 0:
                continue
            what = " and ".join(s for s, z in (("W_V,h[:, e] = 0", v0), ("W_O,h[e, :] = 0", o0))
                                if z)
            out.append(LayerObstruction(
                "zero-channel", f"head {h}, channel {e}: {what}: the channel adds nothing (or "
                "a constant the intercept absorbs), so its other weights are free", extra,
                (h,)))
        if granularity == "elementwise":
            continue
        odd = activation in ODD_ACTIVATIONS
        for e in range(dv):
            for f in range(e + 1, dv):
                a, b = layer.W_V[h, :, e], layer.W_V[h, :, f]
                if _is_zero(a, layer.W_V) or _is_zero(b, layer.W_V):
                    continue
                same = _is_zero(a - b, layer.W_V)
                opposite = _is_zero(a + b, layer.W_V) and (
                    odd or (activation == "sigmoid" and layer.fit_intercept))
                if same or opposite:
                    out.append(LayerObstruction(
                        "duplicate-channel",
                        f"head {h}, channels {e} and {f}: W_V,h[:, {f}] = "
                        + ("" if same else "−") + f"W_V,h[:, {e}], so the two channels are one "
                        "(up to sign): only the combination of their rows of W_O,h is "
                        "identified", dout, (h,)))
    return out


# -- the Jacobian ---------------------------------------------------------------------------
def _spectrum(J, tol, predicted, complete):
    J = J / np.sqrt(J.shape[0])
    s = np.linalg.svd(J, compute_uv=False)
    if s.size < J.shape[1]:
        s = np.concatenate([s, np.zeros(J.shape[1] - s.size)])
    cut = tol * s[0] if s.size and s[0] > 0 else tol
    kept, dropped = s[s >= cut], s[s < cut]
    gap = (float(kept.min() / dropped.max()) if dropped.size and kept.size
           and dropped.max() > 0 else np.inf)
    return LayerJacobianCheck(J.shape[1], J.shape[0], s, int(dropped.size), int(predicted),
                              bool(complete), float(tol), gap)


# -- the report -----------------------------------------------------------------------------
def _align(true_layer, gate, gate_form, granularity, qk):
    """The truth in the fitted form (``qk="full"`` from factored weights), else raise."""
    if not isinstance(true_layer, AttentionLayer):
        raise ValueError(f"true_layer must be an AttentionLayer; got "
                         f"{type(true_layer).__name__}. Build one with AttentionLayer(...) or "
                         "random_attention_layer(...).")
    check_layer_gate(gate)
    check_choice(qk, "qk", QK_FORMS)
    if granularity is not None:
        check_choice(granularity, "granularity", GRANULARITIES)
    if granularity is not None and granularity != true_layer.granularity:
        raise ValueError(
            f"granularity={granularity!r} but the truth's gate weights W_theta are "
            f"{true_layer.granularity or 'absent'}: pass granularity=None (read off the "
            "truth) or a truth with W_theta of shape (H, d) (headwise) or (H, d, d_v) "
            "(elementwise).")
    if qk == "full" and true_layer.qk == "factored":
        if gate in ("key", "query"):
            raise ValueError(f"qk='full' needs bilinear scores; gate={gate!r} applies φ to the "
                             f"{gate} projection: use qk='factored'.")
        true_layer = AttentionLayer(W_V=true_layer.W_V, W_O=true_layer.W_O, P=true_layer.P_,
                                    W_theta=true_layer.W_theta,
                                    intercept=true_layer.intercept)
    elif qk == "factored" and true_layer.qk == "full":
        raise ValueError("the truth has free score matrices P (qk='full'); pass qk='full', or a "
                         "truth with W_Q and W_K for qk='factored'.")
    return true_layer


def layer_identifiability_report(true_layer, *, gate, activation="sigmoid",
                                 gate_form="activation", granularity=None, qk="factored",
                                 n_tokens, head_dim=None, rows="all", X=None, n_ref=32,
                                 random_state=0, tol=1e-10):
    """Gauges, discrete symmetries, obstructions and the Jacobian check of a layer truth.

    The gauges and the Jacobian are at the truth's ``head_dim`` (``d_v*``); a larger fitted
    ``head_dim`` is the obstruction ``"over-specified"``. The verdict (module docstring):
    ``"identifiable up to the gauges"`` when no obstruction applies and the null space of
    ``J`` is the gauges' (with a gap of at least 1e3 between kept and dropped singular
    values), ``"not identifiable"`` when an obstruction applies or ``J`` has more null
    directions, ``"unknown"`` otherwise.

    Parameters
    ----------
    true_layer : AttentionLayer
        The truth, e.g. from :func:`random_attention_layer`.
    gate : {"none", "value", "sdpa", "output", "key", "query"}
        MHA, G2, G1, G5, G3, G4 (as in :func:`attention_layer_output`).
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
    gate_form : {"activation", "multiplicative"}, default="activation"
        ``"multiplicative"``: the gate of Qiu et al. (2025) at the SDPA output (the truth
        holds its ``W_theta``).
    granularity : {"headwise", "elementwise"} or None
        Of the multiplicative gate; ``None`` reads it off the truth.
    qk : {"factored", "full"}, default="factored"
        Of the fitted model. A factored truth is read as ``P_h = W_Q,h W_K,hᵀ/√d_v`` for
        ``qk="full"``.
    n_tokens : int >= 2
        Sequence length ``N``.
    head_dim : int or None
        Fitted ``d_v``; ``None``: the truth's. Above the truth's, the model is over-specified.
    rows : {"all", "last"}, default="all"
    X : array-like of shape (n, n_tokens, d) or None
        Reference tokens of the Jacobian check; ``None``: ``n_ref`` i.i.d. standard normal
        token matrices.
    n_ref : int, default=32
        Reference token matrices when ``X`` is ``None``: ``J`` has ``n_ref · N · d_out``
        rows (``n_ref · d_out`` with ``rows="last"``) and one column per parameter.
    random_state : int, default=0
        Seed of the reference tokens.
    tol : float, default=1e-10
        A singular value of ``J`` below ``tol`` times the largest counts as null (gauge
        directions sit at rounding level, ~1e-15; the others measured above 1e-4 on small
        random truths).

    Returns
    -------
    LayerIdentifiabilityReport
        ``.verdict``, ``.reason``, ``.gauges`` (with ``.gauge_dimension``), ``.symmetries``,
        ``.obstructions``, ``.identified``, ``.jacobian`` (``.matches``), ``.summary()``.

    Raises
    ------
    ValueError
        ``true_layer`` not an :class:`AttentionLayer`; an unknown gate, activation, form, qk
        or rows; a form the truth cannot hold (multiplicative without ``W_theta``, full
        scores with G3/G4, …); ``head_dim`` below the truth's (or above ``d`` with factored
        scores); ``n_tokens < 2``; ``X`` of another shape; fewer rows of ``J`` than
        parameters (``n_ref`` too small).

    Examples
    --------
    >>> from hmoe_estim.layer import layer_identifiability_report, random_attention_layer
    >>> truth = random_attention_layer(2, 3, 2, random_state=0)
    >>> rep = layer_identifiability_report(truth, gate="value", n_tokens=3)
    >>> rep.verdict, rep.gauge_dimension, rep.jacobian.null_dimension
    ('identifiable up to the gauges', 8, 8)
    >>> layer_identifiability_report(truth, gate="none", n_tokens=3, head_dim=3).verdict
    'not identifiable'
    """
    layer = _align(true_layer, gate, gate_form, granularity, qk)
    gate_form = check_form(layer, gate, activation, gate_form, rows)
    granularity = layer.granularity
    N = check_count(n_tokens, "n_tokens")
    if N < 2:
        raise ValueError("n_tokens must be >= 2: with one token the softmax is 1, so the "
                         "scores (W_Q, W_K or P) never enter the output.")
    H, d, dv, dout = layer.n_heads, layer.d, layer.head_dim, layer.d_out
    if head_dim is None:
        head_dim = dv
    head_dim = check_count(head_dim, "head_dim")
    if head_dim < dv:
        raise ValueError(f"head_dim = {head_dim} < d_v* = {dv} (the truth's): the fitted "
                         f"class cannot represent the truth; use head_dim >= {dv}.")
    if qk == "factored" and head_dim > d:
        raise ValueError(f"head_dim = {head_dim} > d = {d} with qk='factored': W_Q W_Kᵀ has "
                         "rank at most d; use head_dim <= d or qk='full'.")
    if X is None:
        X = np.random.default_rng(random_state).normal(size=(check_count(n_ref, "n_ref"), N, d))
    X = check_tokens(X, d)
    if X.shape[1] != N:
        raise ValueError(f"X has {X.shape[1]} tokens per sample but n_tokens = {N}; pass X of "
                         f"shape (n, {N}, {d}) or n_tokens={X.shape[1]}.")
    if not (isinstance(tol, numbers.Real) and 0 < tol < 1):
        raise ValueError(f"tol must be a number in (0, 1); got {tol!r}.")

    layout = layer.layout
    n_rows = X.shape[0] * (1 if rows == "last" else N) * dout
    if n_rows < layout.n_params:
        need = -(-layout.n_params // (n_rows // X.shape[0]))
        raise ValueError(f"the Jacobian would have {n_rows} rows for {layout.n_params} "
                         f"parameters, so its null space says nothing; use n_ref (or X with "
                         f"n) >= {need}, a few times more for a clear rank.")

    ranks = _head_ranks(layer)
    gauges, gauge_head = _gauges(gate, granularity, qk, dv, ranks)
    symmetries = _symmetries(gate, activation, granularity, qk, H, dv, layer.fit_intercept)
    per_head = (layout.n_params - (dout if layer.fit_intercept else 0)) // H
    heads_out = _head_outputs(layer, gate, activation, gate_form, rows, X)
    obstructions = _obstructions(layer, gate, activation, granularity, head_dim, ranks,
                                 per_head, gauge_head, heads_out)

    from ..kernels import layer_jacobian, single_thread_blas

    known = [o.extra_null_dimension for o in obstructions if o.extra_null_dimension is not None]
    complete = len(known) == len(obstructions)
    predicted = sum(g.dimension for g in gauges) + sum(known)
    with single_thread_blas():
        _, J = layer_jacobian(layout.pack(layer), X, *layout.kernel_args(gate, activation,
                                                                          rows))
        jac = _spectrum(J, tol, predicted, complete)

    identified = _identified(gate, activation, granularity, qk, layer.fit_intercept,
                             head_dim > dv, H)
    notes = []
    if layer.qk == "full":
        low = [h for h in range(H) if _rank(layer.P[h], np.max(np.abs(layer.P))) < d]
        if low:
            notes.append(f"P_h of head(s) {low} has rank < d = {d}: a free matrix of any rank "
                         "is identified (qk='full'); a factored fit with head_dim = rank P_h "
                         "would represent it too")
    if _vo_group(gate, granularity) == "GL(d_v)" and min(d, dout) < dv:
        notes.append(f"d_v = {dv} > min(d, d_out) = {min(d, dout)}: C_h has rank < d_v, so "
                     "a head_dim of rank C_h represents the same layer")
    if gate == "output" and activation in ("gelu", "silu"):
        notes.append(f"{activation} is not injective: φ(f') = φ(f*) with f' ≠ f* is not "
                     "excluded by this first-order check")

    null, pred = jac.null_dimension, jac.predicted_null_dimension
    if obstructions:
        ident = False
        reason = ("not identifiable: " + "; ".join(f"{o.name}" for o in obstructions)
                  + (f" (the Jacobian at the truth has {null} null directions, predicted "
                     f"{pred})" if jac.matches else
                     f" (the Jacobian at the truth has {null} null directions against "
                     f"{pred} predicted" + (")" if complete else ", a lower bound)")))
    elif null > pred:
        ident = False
        reason = (f"not identifiable: the Jacobian at the truth has {null} null directions, "
                  f"{null - pred} more than the gauges ({pred}); a degeneracy of the truth "
                  "that no named obstruction covers (or too few reference tokens: try a "
                  "larger n_ref)")
    elif null < pred or jac.gap < 1e3:
        ident = "unknown"
        reason = (f"the Jacobian at the truth has {null} null directions against the gauges' "
                  f"{pred} (gap {jac.gap:.1e}): the prediction does not hold at this truth "
                  "or the numerical rank is unclear; try more reference tokens (n_ref)")
    else:
        ident = True
        reason = (f"identifiable up to the gauges: the Jacobian at the truth has exactly the "
                  f"gauges' {pred} null directions (gap {jac.gap:.1e}), so the weights are "
                  "locally identified up to the gauges and the discrete symmetries (a "
                  "first-order check, not a global argument)")
    return LayerIdentifiabilityReport(
        gate, activation, gate_form, granularity, qk, rows, (H, d, dv, dout), head_dim, N,
        layer.fit_intercept, ident, reason, gauges, symmetries, obstructions, identified, jac,
        notes)


def _identified(gate, activation, granularity, qk, intercept, over, H):
    """What a fit identifies, in words (``over``: the fitted head_dim exceeds the truth's)."""
    odd = activation in ODD_ACTIVATIONS
    spare = "not the channels: a spare channel can be null or split a true one"
    out = []
    if gate in _BILINEAR:
        out.append("P_h = W_Q,h W_K,hᵀ/√d_v" if qk == "factored" else "P_h")
    elif over:
        out.append(f"the scores, {spare}")
    else:
        flip = odd or (gate == "key" and activation == "sigmoid")
        out.append("the score channels (W_Q,h[:, e], W_K,h[:, e]) up to their permutation"
                   + (" and sign flips" if flip else ""))
    vo = _vo_group(gate, granularity)
    if vo == "GL(d_v)":
        out.append("C_h = W_V,h W_O,h")
    elif over:
        out.append(f"each head's output, {spare}")
    elif vo == "diagonal":
        out.append("each channel's W_V,h[:, e] W_O,h[e, :] (a d × d_out matrix) and "
                   "W_θ,h[:, e], up to the channels' permutation"
                   + (" and sign flips" if odd else ""))
    else:
        out.append("the channels (W_V,h[:, e], W_O,h[e, :]) up to their permutation"
                   + (" and sign flips" if odd else
                      " and reflections" if activation == "sigmoid" and intercept else ""))
    if granularity == "headwise":
        out.append("W_θ,h" + (" up to sign" if odd else ""))
    if intercept:
        out.append("the intercept b" + (" (up to the reflections' shifts)"
                                        if activation == "sigmoid" and vo is None
                                        and granularity is None else ""))
    return out + (["the heads up to their relabelling"] if H >= 2 else [])
