"""Which gates and activations are identifiable: exact symmetries, obstructions and witnesses.

A sample-complexity study reads the Voronoi loss of least-squares fits (eq. (3)) against ``n``.
That loss can only fall if the fitted class represents the true regression function ``f_{G*}``
(eq. (2), (9), (12)) in essentially one way. This module sorts every exact alternative
representation of ``f_{G*}`` in the class of ``K`` channels into

- **symmetries**, which the metrics quotient (:func:`hmoe_estim.voronoi_loss` is 0 on them):
  relabelling heads, channels and tokens; the softmax translation gauge (A.3); splitting a
  channel's weight between copies of its atom and zero-weight channels (``K > K*``); the sign
  flip ``(ω, a) -> (−ω, −a)`` of G1 and G2 with an odd activation (tanh);
- **obstructions**, genuine non-identifiability: another measure with *exactly* the same
  regression function and a Voronoi loss > 0. Each comes with a *witness*, a
  :class:`~hmoe_estim.MixingMeasure` of the fitted size:

  ``mha-fibre`` (``gate="none"``, and ``"output"`` through ``f = φ(f_MHA)``)
      ``f_MHA(x) = Σ_h Σ_i g[h,i](x) b[h,i]·x`` with ``b[h,i] = Σ_k ω[h,k] a[h,i,k]``: only
      ``b`` is identified, a fibre of dimension ``K + N K D − N D`` per head (the local form
      is the PDE (5) of the paper). Witness: ``(2ω, a/2)``.
  ``cross-head-linear`` (``"none"``/``"output"``, ``H >= 2``)
      ``Σ_i g[h,i] = 1`` in every head, so ``c·x`` added to all ``b[h,i]`` of one head and
      subtracted from all ``b[h',i]`` of another cancels: ``(H − 1) D`` more directions.
  ``token-split`` (``"value"``, ``φ(0) = 0`` — tanh, GELU, SiLU —, ``N >= 2``, ``K >= K* + 1``)
      ``ω Σ_i g_i φ(a_i·x) = ω Σ_{i∈S} g_i φ(a_i·x) + ω Σ_{i∉S} g_i φ(a_i·x)``: a channel's
      tokens split into two channels whose other experts are 0.
  ``token-regroup`` (``"value"``, *any* φ, sigmoid included, ``N, K* >= 2``, ``K > K*``)
      G2 is ``Σ_i g_i(x) Σ_k ω_k φ(a_{i,k}·x)``: per token, a weighted sum of experts, and the
      channels only group them. With true channels ``(ω_0, a_{·,0})``, ``(ω_1, a_{·,1})``,
      ``ω_0 <= ω_1``, the channels ``(ω_0; a_{0,0}, a_{i,1} for i >= 1)``,
      ``(ω_0; a_{0,1}, a_{i,0} for i >= 1)`` and ``(ω_1 − ω_0; a_{·,1})`` give every token the
      same weighted experts, hence the same ``f``; their branches are not the true ones.
  ``null-atom`` (``"value"``/``"sdpa"``, ``φ(0) = 0``, ``K >= K* + 1``)
      a channel whose experts are all 0 contributes ``ω φ(0) = 0`` whatever its weight ``ω``.

Sigmoid (``φ(0) = 1/2``, not odd) has no sign flip, token split or null atom under
``ω >= 0`` (A.2); G1 with sigmoid has no obstruction found, G2 with sigmoid has the token
regrouping once a spare channel exists.

The **numerical check** is the spectrum of the Jacobian ``J[t, p] = ∂f(x_t)/∂θ_p`` at the
truth with ``K = K*`` (``θ`` the free parameters of ``hmoe_estim.model._parameters``, gauge fixed
by ``M[h, N-1] = 0``; the Fisher information of eq. (1) is ``JᵀJ / (n σ²)``). Relabellings and
sign flips are discrete, so the null space of ``J`` must have exactly the dimension of the
named continuous obstructions (``mha-fibre`` and ``cross-head-linear``), 0 for G1 and G2.

The verdict of :func:`identifiability_report` is ``False`` when an obstruction applies (with
its witness), ``True`` only for sigmoid (G1, and G2 with ``K = K*``) at a truth that
satisfies (A.2)–(A.5) and passes the Jacobian check, and ``"unknown"`` otherwise — e.g. tanh,
GELU, SiLU with ``K = K*``, which are locally identifiable (the check passes) but for which no
global
argument is available. See the user guide page "Which gates and activations are
identifiable".

Why one module of this size: each named obstruction comes with the construction of its witness
and the check of that witness, and the report and the Jacobian check must agree on the same
list of obstructions. The verdicts of a study's models (and the reading of its rates) are
``hmoe_estim/study/_verdicts.py``, which calls :func:`identifiability_report`.
"""

import numbers
from dataclasses import dataclass, field

import numpy as np

from .._names import GATE_LABELS, ODD_ACTIVATIONS
from .._validation import check_activation, check_gate
from ..model import MixingMeasure, n_params, triangle_indices
from ._branches import token_gate

__all__ = [
    "PHI_AT_ZERO",
    "IdentifiabilityReport",
    "JacobianCheck",
    "NearAlternative",
    "Obstruction",
    "Symmetry",
    "fit_alternatives",
    "identifiability_report",
    "regression_jacobian",
    "verdict_label",
    "measure_verdict_label",
    "quotient_jacobian",
    "QUOTIENTED",
]

#: ``φ(0)`` of each activation: ``φ(0) = 0`` makes zero experts contribute nothing.
PHI_AT_ZERO = {"sigmoid": 0.5, "tanh": 0.0, "gelu": 0.0, "silu": 0.0}


@dataclass
class Symmetry:
    """An exact symmetry of the model that the metrics quotient.

    Attributes
    ----------
    name : str
    description : str
    """

    name: str
    description: str


@dataclass
class Obstruction:
    """An exact alternative representation of ``f_{G*}``: genuine non-identifiability.

    Attributes
    ----------
    name : str
        ``"mha-fibre"``, ``"cross-head-linear"``, ``"token-split"`` or ``"null-atom"``.
    description : str
    witness : MixingMeasure
        A measure of the fitted size ``(H*, N*, K, D)`` with the same regression function.
    null_dimension : int
        Dimension it adds to the null space of the Jacobian at the truth with ``K = K*``
        (0 for obstructions that need a spare channel).
    function_gap : float
        ``max_x |f_witness(x) − f_{G*}(x)|`` on the check sample (``<= 1e-10`` relative).
    voronoi_loss : float
        Symmetry-aware ``L_2`` Voronoi loss of the witness against ``G*`` (``> 0``), cells on
        the check sample.
    """

    name: str
    description: str
    witness: MixingMeasure
    null_dimension: int
    function_gap: float
    voronoi_loss: float

    def to_dict(self):
        """JSON-safe form (the witness as lists)."""
        return {"name": self.name, "description": self.description,
                "null_dimension": int(self.null_dimension),
                "function_gap": float(self.function_gap),
                "voronoi_loss": float(self.voronoi_loss), "witness": self.witness.to_dict()}


@dataclass
class NearAlternative:
    """A measure far from ``G*`` (Voronoi loss > 0) whose function is *nearly* ``f_{G*}``.

    Not an exact obstruction: a local minimiser of ``‖f_G − f_{G*}‖`` at a positive distance.
    A least-squares fit cannot tell it from ``G*`` while the statistical resolution of ``f``,
    about ``σ sqrt(P / n)`` (``P`` free parameters, eq. (1)), is above ``rms_gap``: the Voronoi
    loss of a study stays flat until ``n ≳ P σ² / rms_gap²``.

    Attributes
    ----------
    name : str
        ``"token-exchange"``: G2 channels that exchanged the experts of some tokens, then
        moved to the nearest local minimiser of ``‖f − f*‖`` (weights ``>= 0``).
    description : str
    measure : MixingMeasure
        Of the fitted size (zero-weight channels appended when ``K > K*``).
    rms_gap : float
        ``sqrt(mean (f − f*)²)`` on the check sample.
    voronoi_loss : float
        Symmetry-aware ``L_2`` Voronoi loss against ``G*``.
    n_params : int
        ``P`` of the fitted class.
    """

    name: str
    description: str
    measure: MixingMeasure
    rms_gap: float
    voronoi_loss: float
    n_params: int

    def samples_to_resolve(self, noise):
        """``P σ² / rms_gap²``: the ``n`` from which a fit can tell it from ``G*``."""
        return float(self.n_params * noise**2 / max(self.rms_gap, 1e-300) ** 2)

    def to_dict(self):
        """JSON-safe form."""
        return {"name": self.name, "description": self.description,
                "rms_gap": float(self.rms_gap), "voronoi_loss": float(self.voronoi_loss),
                "n_params": int(self.n_params), "measure": self.measure.to_dict()}


@dataclass
class JacobianCheck:
    """Spectrum of the Jacobian of ``f`` at the truth (``K = K*``).

    Attributes
    ----------
    n_params : int
        Free parameters ``θ`` (gauge fixed).
    n_samples : int
        Rows of ``J`` (inputs uniform on ``[-1, 1]^D``).
    singular_values : ndarray
        Singular values of ``J / sqrt(n)``, decreasing (their squares are the eigenvalues of
        the Fisher information times ``σ²``).
    null_dimension : int
        Number of singular values below ``tol`` times the largest.
    expected_null_dimension : int
        Sum of the ``null_dimension`` of the named obstructions.
    tol : float
    gap : float
        Smallest kept over largest dropped singular value (``inf`` when nothing is dropped):
        how clear the numerical rank is.
    """

    n_params: int
    n_samples: int
    singular_values: np.ndarray
    null_dimension: int
    expected_null_dimension: int
    tol: float
    gap: float

    @property
    def explained(self):
        """Whether the null space is exactly the one the named obstructions predict."""
        return self.null_dimension == self.expected_null_dimension

    def to_dict(self):
        """JSON-safe form."""
        s = self.singular_values
        return {"n_params": self.n_params, "n_samples": self.n_samples,
                "null_dimension": self.null_dimension,
                "expected_null_dimension": self.expected_null_dimension,
                "explained": self.explained, "tol": self.tol,
                "gap": float(self.gap) if np.isfinite(self.gap) else None,
                "largest_singular_value": float(s[0]) if s.size else None,
                "smallest_singular_value": float(s[-1]) if s.size else None}


@dataclass
class IdentifiabilityReport:
    """Result of :func:`identifiability_report`.

    Attributes
    ----------
    gate, activation : str
    n_experts : int
        Fitted ``K``.
    true_shape : tuple
        ``(H*, N*, K*, D)``.
    identifiable : bool or "unknown"
        ``False``: an obstruction applies (see ``obstructions``); ``True``: G1 with sigmoid,
        or G2 with sigmoid where no regrouping applies (``K = K*``), no obstruction, the
        truth satisfies (A.2)–(A.5) and the Jacobian check
        passes; ``"unknown"``: no exact obstruction found but no argument either (``reason``).
    reason : str
    symmetries : list of Symmetry
        Exact symmetries the metrics quotient.
    obstructions : list of Obstruction
    jacobian : JacobianCheck
    locally_identifiable : bool
        The Jacobian at ``K = K*`` has no null direction beyond the named obstructions and
        the obstructions are not continuous (no ``mha-fibre``).
    notes : list of str
        Near-degeneracies and assumption violations that do not decide the verdict alone.
    near_alternatives : list of NearAlternative
        Measures with a nearly equal function (searched for G2, see :class:`NearAlternative`),
        closest first.
    level : str
        The level of the Voronoi loss the verdict is about: ``"channel"`` (cells over value
        channels) or ``"measure"`` (cells over the atoms of the mixing measure, G2 only).
    quotiented : list of Obstruction
        Alternatives that are exact (same ``f``) and that this level quotients: their witness
        has Voronoi loss 0 at this level (``.voronoi_loss`` is that loss). Empty at the
        channel level; at the measure level ``token-regroup``, ``token-split`` and
        ``null-atom`` where they apply.
    quotient_jacobian : JacobianCheck or None
        At the measure level, the Jacobian of ``f`` at the truth in the coordinates of the
        quotient: per-atom weights ``w[h,i,k]`` (token by token) instead of per-channel
        weights, the gates and the experts; full column rank means no direction that changes
        the measure keeps ``f`` to first order. ``None`` at the channel level.
    """

    gate: str
    activation: str
    n_experts: int
    true_shape: tuple
    identifiable: object
    reason: str
    symmetries: list
    obstructions: list
    jacobian: JacobianCheck
    locally_identifiable: bool
    notes: list = field(default_factory=list)
    near_alternatives: list = field(default_factory=list)
    level: str = "channel"
    quotiented: list = field(default_factory=list)
    quotient_jacobian: object = None

    @property
    def verdict(self):
        """``"identifiable"``, ``"not identifiable"`` or ``"unknown"``."""
        if self.identifiable is True:
            return "identifiable"
        if self.identifiable is False:
            return "not identifiable"
        return "unknown"

    def summary(self):
        """A few lines of plain text."""
        H, N, K, D = self.true_shape
        lines = [
            f"{GATE_LABELS[self.gate]} ({self.gate}), {self.activation}, K = {self.n_experts} "
            f"fitted to K* = {K} (H* = {H}, N* = {N}, D = {D}): {self.verdict}"
            + (f" at the {self.level} level" if self.level != "channel" else ""),
            f"  reason: {self.reason}",
            "  symmetries quotiented: " + ", ".join(s.name for s in self.symmetries),
        ]
        for o in self.quotiented:
            lines.append(f"  quotiented at the {self.level} level: {o.name} (witness "
                         f"|f - f*| = {o.function_gap:.1e}, {self.level}-level Voronoi loss "
                         f"{o.voronoi_loss:.1e})")
        for o in self.obstructions:
            lines.append(f"  obstruction {o.name}: witness |f - f*| = {o.function_gap:.1e}, "
                         f"Voronoi loss {o.voronoi_loss:.3g}; {o.description}")
        j = self.jacobian
        lines.append(f"  Jacobian at K = K*: {j.n_params} parameters, null space "
                     f"{j.null_dimension} (named obstructions: {j.expected_null_dimension})")
        q = self.quotient_jacobian
        if q is not None:
            lines.append(f"  Jacobian in the quotient (per-atom weights): {q.n_params} "
                         f"parameters, null space {q.null_dimension}")
        lines += [f"  note: {n}" for n in self.notes]
        for a in self.near_alternatives:
            lines.append(f"  near alternative {a.name}: rms |f - f*| = {a.rms_gap:.2e}, Voronoi "
                         f"loss {a.voronoi_loss:.3g} (a fit resolves it from n ~ "
                         f"{a.n_params} σ² / {a.rms_gap:.1e}²)")
        return "\n".join(lines)

    def to_dict(self):
        """JSON-safe form (witnesses as lists)."""
        return {"gate": self.gate, "activation": self.activation, "n_experts": self.n_experts,
                "true_shape": list(self.true_shape), "identifiable": self.identifiable,
                "verdict": self.verdict, "reason": self.reason,
                "symmetries": [s.name for s in self.symmetries],
                "obstructions": [o.to_dict() for o in self.obstructions],
                "jacobian": self.jacobian.to_dict(),
                "locally_identifiable": self.locally_identifiable, "notes": list(self.notes),
                "near_alternatives": [a.to_dict() for a in self.near_alternatives],
                "level": self.level, "quotiented": [o.to_dict() for o in self.quotiented],
                "quotient_jacobian": (None if self.quotient_jacobian is None
                                      else self.quotient_jacobian.to_dict())}


# -- the Jacobian ---------------------------------------------------------------------------
def _phi_and_derivative(activation, z):
    from .._names import ACTIVATION_CODES
    from ..kernels import activation_values

    z = np.asarray(z, dtype=np.float64)
    v, d = activation_values(ACTIVATION_CODES[activation], np.ascontiguousarray(z.ravel()))
    return v.reshape(z.shape), d.reshape(z.shape)


def regression_jacobian(measure, X, *, gate="none", activation="sigmoid"):
    """Per-sample Jacobian ``J[t, p] = ∂f_G(x_t) / ∂θ_p`` of the regression function.

    ``θ`` is the packed parameter vector of ``hmoe_estim.model._parameters.pack`` (``ω``, the
    upper triangles of ``M[h, i]`` for ``i < N-1``, ``a``), at the normalised measure. With
    ``g[h,i] = softmax_i(xᵀ M[h,i] x)``, expert ``E = a·x`` (``φ(a·x)`` for G2),
    ``u[h,k] = Σ_i g[h,i] E[h,i,k]``, ``ψ = φ`` for G1 (identity otherwise) and the outer
    ``φ`` of G5 (``O' = φ'(f_MHA)``, 1 otherwise):

    - ``∂f/∂ω[h,k] = O' ψ(u[h,k])``
    - ``∂f/∂a[h,i,k] = O' ω[h,k] ψ'(u[h,k]) g[h,i] E'(a[h,i,k]·x) x``
    - ``∂f/∂M[h,i]_{pq} = O' Σ_k ω[h,k] ψ'(u[h,k]) g[h,i] (E[h,i,k] − u[h,k]) c_pq x_p x_q``
      (``c_pq = 1`` on the diagonal, 2 off it).

    Parameters
    ----------
    measure : MixingMeasure
    X : ndarray of shape (n, D)
    gate : {"none", "value", "sdpa", "output"}, default="none"
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"

    Returns
    -------
    ndarray of shape (n, n_params)
    """
    from ..model import check_inputs

    check_gate(gate)
    check_activation(activation)
    if not isinstance(measure, MixingMeasure):
        raise ValueError(f"measure must be a MixingMeasure; got {type(measure).__name__}.")
    G = measure.normalized()
    H, N, K, D = G.shape
    X = check_inputs(X, D)
    n = X.shape[0]
    g = token_gate(G, X)  # (n, H, N)
    z = np.einsum("nd,hikd->nhik", X, G.a)
    if gate == "value":
        E, dE = _phi_and_derivative(activation, z)
    else:
        E, dE = z, np.ones_like(z)
    u = np.einsum("nhi,nhik->nhk", g, E)
    if gate == "sdpa":
        psi, dpsi = _phi_and_derivative(activation, u)
    else:
        psi, dpsi = u, np.ones_like(u)
    if gate == "output":
        _, outer = _phi_and_derivative(activation, np.einsum("hk,nhk->n", G.omega, psi))
    else:
        outer = np.ones(n)
    J_omega = outer[:, None, None] * psi  # (n, H, K)
    w = outer[:, None, None] * G.omega[None] * dpsi  # (n, H, K)
    J_a = np.einsum("nhk,nhi,nhik,nd->nhikd", w, g, dE, X)
    p, q = triangle_indices(D)
    quad = X[:, p] * X[:, q] * np.where(p == q, 1.0, 2.0)[None]  # (n, T)
    coef = np.einsum("nhk,nhi,nhik->nhi", w, g, E - u[:, :, None, :])[:, :, : N - 1]
    J_M = coef[..., None] * quad[:, None, None, :]  # (n, H, N-1, T)
    J = np.concatenate([J_omega.reshape(n, -1), J_M.reshape(n, -1), J_a.reshape(n, -1)], axis=1)
    assert J.shape[1] == n_params(H, N, K, D)
    return J


# -- witnesses ------------------------------------------------------------------------------
def _padded(omega, M, a, K):
    """Append zero-weight channels (copies of channel 0's experts) up to ``K`` channels."""
    H, N, Ks, D = a.shape
    extra = K - Ks
    if extra <= 0:
        return MixingMeasure(omega, M, a)
    omega = np.concatenate([omega, np.zeros((H, extra))], axis=1)
    a = np.concatenate([a, np.repeat(a[:, :, :1], extra, axis=2)], axis=2)
    return MixingMeasure(omega, M, a)


def _mha_fibre(Gs, K):
    return _padded(2.0 * Gs.omega, Gs.M, 0.5 * Gs.a, K)


def _cross_head(Gs, K):
    H, N, Ks, D = Gs.shape
    a = Gs.a.copy()
    c = np.zeros(D)
    c[0] = 0.5
    k0, k1 = int(np.argmax(Gs.omega[0])), int(np.argmax(Gs.omega[1]))
    a[0, :, k0] += c / Gs.omega[0, k0]
    a[1, :, k1] -= c / Gs.omega[1, k1]
    return _padded(Gs.omega.copy(), Gs.M, a, K)


def _token_split(Gs, K):
    H, N, Ks, D = Gs.shape
    k = int(np.argmax(Gs.omega[0]))
    omega = np.concatenate([Gs.omega, np.zeros((H, 1))], axis=1)
    omega[0, Ks] = Gs.omega[0, k]
    a = np.concatenate([Gs.a, np.zeros((H, N, 1, D))], axis=2)
    a[0, 1:, Ks] = Gs.a[0, 1:, k]  # spare channel: tokens 1..N-1 of channel k, token 0 zero
    a[0, 1:, k] = 0.0  # channel k keeps token 0 only
    return _padded(omega, Gs.M, a, K)


def _regroup_pair(Gs):
    """Head and channels ``(h, k0, k1)`` with the closest weights, ``ω[h,k0] <= ω[h,k1]``."""
    best = None
    for h in range(Gs.n_heads):
        for k0 in range(Gs.n_experts):
            for k1 in range(Gs.n_experts):
                if k0 != k1 and Gs.omega[h, k0] <= Gs.omega[h, k1]:
                    d = Gs.omega[h, k1] - Gs.omega[h, k0]
                    if best is None or d < best[0]:
                        best = (d, h, k0, k1)
    return best


def _token_regroup(Gs, K):
    H, N, Ks, D = Gs.shape
    diff, h, k0, k1 = _regroup_pair(Gs)
    w0 = Gs.omega[h, k0]
    omega, a = Gs.omega.copy(), Gs.a.copy()
    if diff > 0:  # the spare channel carries ω_k1 − ω_k0 of channel k1
        omega = np.concatenate([omega, np.zeros((H, 1))], axis=1)
        a = np.concatenate([a, Gs.a[:, :, k1 : k1 + 1]], axis=2)
        omega[h, Ks] = diff
    omega[h, k1] = w0
    a[h, 1:, k0] = Gs.a[h, 1:, k1]  # channel k0: token 0 of k0, tokens >= 1 of k1
    a[h, 1:, k1] = Gs.a[h, 1:, k0]  # channel k1: token 0 of k1, tokens >= 1 of k0
    return _padded(omega, Gs.M, a, K)


def _null_atom(Gs, K):
    H, N, Ks, D = Gs.shape
    omega = np.concatenate([Gs.omega, np.zeros((H, 1))], axis=1)
    omega[0, Ks] = float(np.mean(Gs.omega[Gs.omega > 0])) if np.any(Gs.omega > 0) else 1.0
    a = np.concatenate([Gs.a, np.zeros((H, N, 1, D))], axis=2)
    return _padded(omega, Gs.M, a, K)


def _exchange_seeds(Gs, max_seeds):
    """G2 seeds: two channels of a head exchange the experts of one token, weights averaged."""
    H, N, Ks, D = Gs.shape
    seeds = []
    for h in range(H):
        for k0 in range(Ks):
            for k1 in range(k0 + 1, Ks):
                for i in range(N - 1):  # exchanging token N-1 = exchanging the others
                    omega, a = Gs.omega.copy(), Gs.a.copy()
                    a[h, i, k0], a[h, i, k1] = Gs.a[h, i, k1], Gs.a[h, i, k0]
                    omega[h, [k0, k1]] = 0.5 * (Gs.omega[h, k0] + Gs.omega[h, k1])
                    seeds.append(MixingMeasure(omega, Gs.M, a))
    return seeds[:max_seeds]


#: A minimiser this close to ``G*`` (Voronoi loss) is ``G*`` again; one whose function is this
#: close to ``f*`` (rms) is an exact alternative: rounding level, not a near-alternative.
_SAME_MEASURE, _SAME_FUNCTION = 1e-3, 1e-10


def _minimisers(Gs, seeds, gate, activation, X, max_nfev=300):
    """``(G, rms gap, Voronoi loss)`` of the local minimiser of ``‖f_G − f*‖`` on ``X`` that
    each of ``seeds`` (one shape) leads to: bounded least squares, weights ``>= 0``."""
    from scipy.optimize import least_squares

    from ..model import pack, regression_function, unpack
    from ._voronoi import voronoi_loss

    shape = seeds[0].shape
    y = regression_function(Gs, X, gate=gate, activation=activation)
    lower = np.full(n_params(*shape), -np.inf)
    lower[: shape[0] * shape[2]] = 0.0

    def residual(t):
        return regression_function(unpack(t, shape), X, gate=gate, activation=activation) - y

    def jacobian(t):
        return regression_jacobian(unpack(t, shape), X, gate=gate, activation=activation)

    out = []
    for seed in seeds:
        sol = least_squares(residual, np.maximum(pack(seed), lower), jac=jacobian,
                            bounds=(lower, np.inf), xtol=1e-12, ftol=1e-12, gtol=1e-12,
                            max_nfev=max_nfev)
        G = unpack(sol.x, shape)
        out.append((G, float(np.sqrt(np.mean(sol.fun**2))),
                    float(voronoi_loss(G, Gs, gate=gate, activation=activation, X_ref=X))))
    return out


def _near_alternatives(Gs, gate, activation, K, X, max_seeds=6):
    """Local minimisers of ‖f − f*‖ (check sample) from the token-exchange seeds of G2."""
    found = []
    seeds = _exchange_seeds(Gs, max_seeds)
    for G, gap, loss in _minimisers(Gs, seeds, gate, activation, X) if seeds else []:
        if loss > _SAME_MEASURE and gap > _SAME_FUNCTION:  # not G* again, not an exact twin
            found.append((gap, loss, G))
    found.sort(key=lambda t: t[0])
    shape = Gs.shape
    out, P = [], n_params(shape[0], shape[1], K, shape[3])
    for gap, loss, G in found[:1]:
        G = _padded(G.omega, G.M, G.a, K)
        out.append(NearAlternative(
            "token-exchange", "two G2 channels exchange the experts of a token (weights "
            "averaged), then the nearest local minimiser of ‖f − f*‖: a distinct measure whose "
            "function differs from f* by rms_gap only", G, gap, float(loss), P))
    return out


def fit_alternatives(true_measure, fits, *, gate, activation, n_check=2000, random_state=0,
                     max_nfev=300):
    """Where fitted measures lead: each moved to the nearest local minimiser of ``‖f − f*‖``.

    A fit whose Voronoi loss stays large as ``n`` grows, though its objective is below the
    truth's, is either in the basin of ``G*`` — its loss is statistical and falls, if slowly —
    or near a distinct measure whose function is nearly ``f*`` (a :class:`NearAlternative`,
    which holds the loss up until ``n ≳ P σ² / rms_gap²``), or at an exact alternative (a
    witness that ``G*`` is not identifiable in the fitted class). Each fit is moved, by a
    bounded least-squares solve of ``f_G − f*`` on ``n_check`` inputs uniform on
    ``[-1, 1]^D`` (weights ``>= 0``, the fit's own shape), to the local minimiser it leads to,
    and sorted into those three.

    Parameters
    ----------
    true_measure : MixingMeasure
        ``G*``.
    fits : list of MixingMeasure
        Fitted measures of one shape ``(H*, N*, K, D)``, ``K >= K*``.
    gate, activation : str
    n_check : int, default=2000
    random_state : int, default=0
        Seed of the check inputs.
    max_nfev : int, default=300
        Function evaluations per solve.

    Returns
    -------
    dict
        ``"fits"``, ``"to_truth"`` (Voronoi loss of the minimiser below 1e-3),
        ``"to_alternative"`` (a positive loss at a positive rms gap), ``"to_exact"`` (a
        positive loss at an rms gap below 1e-10), and ``"alternative"``: the
        near-alternative of smallest rms gap (a :class:`NearAlternative` named
        ``"fit-seeded"``), or ``None``; ``"exact"``: one exact alternative found, or ``None``.

    Raises
    ------
    ValueError
        An unknown gate or activation, no fit, or fits whose shape does not extend the truth's.
    """
    gate, activation = check_gate(gate), check_activation(activation)
    if not isinstance(true_measure, MixingMeasure):
        raise ValueError("true_measure must be a MixingMeasure.")
    fits = list(fits)
    if not fits:
        raise ValueError("fit_alternatives needs at least one fitted measure.")
    H, N, Ks, D = true_measure.shape
    shape = fits[0].shape
    if any(G.shape != shape for G in fits) or shape[:2] != (H, N) or shape[3] != D \
            or shape[2] < Ks:
        raise ValueError(f"the fits must share one shape (H*, N*, K, D) = ({H}, {N}, K >= {Ks}, "
                         f"{D}) of the truth; got {sorted({G.shape for G in fits})}.")
    X = np.random.default_rng(random_state).uniform(-1.0, 1.0, size=(int(n_check), D))
    out = {"fits": len(fits), "to_truth": 0, "to_alternative": 0, "to_exact": 0,
           "alternative": None, "exact": None}
    near = []
    for G, gap, loss in _minimisers(true_measure, fits, gate, activation, X, max_nfev):
        if loss <= _SAME_MEASURE:
            out["to_truth"] += 1
        elif gap <= _SAME_FUNCTION:
            out["to_exact"] += 1
            out["exact"] = out["exact"] or NearAlternative(
                "fit-exact", "a fit moved to the nearest minimiser of ‖f − f*‖: the function "
                "of G*, a measure at a positive Voronoi loss", G, gap, loss, n_params(*shape))
        else:
            out["to_alternative"] += 1
            near.append((gap, loss, G))
    if near:
        gap, loss, G = min(near, key=lambda t: t[0])
        out["alternative"] = NearAlternative(
            "fit-seeded", "a fit moved to the nearest local minimiser of ‖f − f*‖: a distinct "
            "measure whose function differs from f* by rms_gap only", G, gap, loss,
            n_params(*shape))
    return out


def _check_witness(witness, Gs, gate, activation, X, level="channel"):
    from ..model import regression_function
    from ._voronoi import voronoi_loss

    f = regression_function(witness, X, gate=gate, activation=activation)
    fs = regression_function(Gs, X, gate=gate, activation=activation)
    gap = float(np.max(np.abs(f - fs)))
    loss = voronoi_loss(witness, Gs, gate=gate, activation=activation, X_ref=X, level=level)
    return gap, float(loss)


def _spectrum_check(J, tol, expected):
    """:class:`JacobianCheck` of ``J / sqrt(n)``: singular values, numerical null space."""
    J = J / np.sqrt(J.shape[0])
    s = np.linalg.svd(J, compute_uv=False)
    s = np.concatenate([s, np.zeros(J.shape[1] - s.size)]) if s.size < J.shape[1] else s
    cut = tol * s[0] if s.size and s[0] > 0 else tol
    null = int(np.sum(s < cut))
    kept, dropped = s[s >= cut], s[s < cut]
    gap = float(kept.min() / dropped.max()) if dropped.size and dropped.max() > 0 and kept.size \
        else np.inf
    return JacobianCheck(J.shape[1], J.shape[0], s, null, int(expected), float(tol), gap)


def quotient_jacobian(measure, X, *, activation="sigmoid"):
    """Jacobian of the G2 regression function in the coordinates of the atom measure.

    G2 is ``f(x) = Σ_h Σ_i g[h,i](x) Σ_k w[h,i,k] φ(a[h,i,k]·x)`` with per-atom weights
    ``w[h,i,k]`` (``= ω[h,k]`` for a channel measure; regrouping and splitting channels reach
    other ``w``): the columns are ``∂f/∂w[h,i,k] = g[h,i] φ(a[h,i,k]·x)``, then the gate and
    expert columns of :func:`regression_jacobian` (``gate="value"``; at ``w = ω`` they are the
    same). Shape ``(n, H N K + n_params − H K)``.
    """
    from ..kernels import phi

    G = measure.normalized()
    H, N, K, D = G.shape
    J = regression_jacobian(G, X, gate="value", activation=activation)
    g = token_gate(G, X)
    E = phi(activation, np.einsum("nd,hikd->nhik", X, G.a))
    J_w = (g[..., None] * E).reshape(X.shape[0], H * N * K)
    return np.concatenate([J_w, J[:, H * K:]], axis=1)


# -- the report -----------------------------------------------------------------------------
def _check_args(true_measure, gate, activation, n_experts, n_heads, n_tokens):
    check_gate(gate)
    check_activation(activation)
    if not isinstance(true_measure, MixingMeasure):
        raise ValueError(
            f"true_measure must be a MixingMeasure; got {type(true_measure).__name__}. Build "
            "one with MixingMeasure(omega, M, a) or hmoe_estim.random_measure(...)."
        )
    H, N, Ks, D = true_measure.shape
    if isinstance(n_experts, bool) or not isinstance(n_experts, numbers.Integral):
        raise ValueError(f"n_experts must be an integer (the fitted K); got {n_experts!r}.")
    if n_experts < Ks:
        raise ValueError(
            f"n_experts = {n_experts} is below the truth's K* = {Ks}: the fitted class cannot "
            f"represent G*. Pass n_experts >= {Ks} (K = K* exactly specified, K > K* "
            "over-specified)."
        )
    for name, given, true in (("n_heads", n_heads, H), ("n_tokens", n_tokens, N)):
        if given is not None and given != true:
            raise ValueError(
                f"{name} = {given} but the truth has {true}: the fitted class uses H = H* and "
                f"N = N* (eq. (3)). Pass {name}={true} or a truth with {given}."
            )
    return int(n_experts)


def _assumption_issues(Gs):
    H, N, K, D = Gs.shape
    issues = []
    if np.any(Gs.omega <= 0):
        issues.append("a true weight ω*[h,k] is <= 0: that channel's experts are not "
                      "identified (A.2 asks ω* >= 0; a zero weight is a missing channel)")
    if N < 2:
        issues.append("N* = 1: the token gate is constant and (A.4) cannot hold; channels "
                      "can move between heads")
    elif any(np.all(Gs.M[h, : N - 1] == 0) for h in range(H)):
        issues.append("a head has M*[h, i] = 0 for every i (violates (A.4)): its gate is "
                      "constant")
    flat = Gs.a.reshape(-1, D)
    d = np.linalg.norm(flat[:, None] - flat[None], axis=2)
    if np.any(d[np.triu_indices(len(flat), 1)] == 0):
        issues.append("two true experts a*[h,i,k] coincide (violates (A.5))")
    if np.any(np.all(Gs.a == 0, axis=3)):
        issues.append("a true expert a*[h,i,k] is 0")
    return issues


def identifiability_report(true_measure, *, gate, activation, n_experts, n_heads=None,
                           n_tokens=None, n_check=2000, tol=1e-10, random_state=0,
                           search_near=True, level="channel"):
    """Diagnose whether fitting ``n_experts`` channels to ``true_measure`` is identifiable.

    Lists the exact symmetries the metrics quotient, the exact obstructions (each with a
    witness of the fitted size, checked: ``max |f_witness − f_{G*}|`` and its symmetry-aware
    Voronoi loss), and the numerical rank of the Jacobian of ``f`` at the truth with
    ``K = K*`` (``regression_jacobian``; Fisher information ``JᵀJ/(nσ²)`` of eq. (1)).

    Parameters
    ----------
    true_measure : MixingMeasure
        ``G*``, shape ``(H*, N*, K*, D)``.
    gate : {"none", "value", "sdpa", "output"}
    activation : {"sigmoid", "tanh", "gelu", "silu"}
    n_experts : int
        Fitted ``K >= K*``.
    n_heads, n_tokens : int or None
        Fitted ``H`` and ``N`` when known (they must equal ``H*`` and ``N*``, eq. (3)).
    n_check : int, default=2000
        Inputs, uniform on ``[-1, 1]^D``, for the witnesses' function check and the Jacobian.
    tol : float, default=1e-10
        A singular value of ``J`` below ``tol`` times the largest counts as null. Exact null
        directions sit at ~1e-15 relative; genuine but ill-conditioned directions measured
        down to ~1e-8 (sigmoid G2, D = 2, H = 2, N = 3, K = 3), so 1e-10 separates them;
        ``.jacobian.gap`` tells how clearly.
    random_state : int, default=0
        Seed of the check inputs.
    search_near : bool, default=True
        For G2 with ``K* >= 2`` and ``N* >= 2``, also search near-alternatives
        (``NearAlternative``): a few bounded least-squares solves of ``‖f − f*‖`` from
        token-exchange seeds.
    level : {"channel", "measure"}, default="channel"
        The level of the Voronoi loss the verdict is about (see
        :func:`hmoe_estim.voronoi_loss`). ``"measure"`` (``gate="value"`` only): the
        witnesses are checked with the measure-level loss; those it quotients (loss 0:
        ``token-regroup``, ``token-split``, ``null-atom``) move to ``.quotiented``, and the
        verdict is read with the Jacobian in the quotient (``.quotient_jacobian``, per-atom
        weights). Measure-level verdicts of over-specified G2: sigmoid identifiable; tanh,
        GELU and SiLU ``"unknown"`` (near-null atoms, and for GELU/SiLU the reflection
        ``φ(z) − φ(−z) = z``; see the user guide page "Which gates and activations are
        identifiable").

    Returns
    -------
    IdentifiabilityReport
        ``.identifiable`` (True / False / ``"unknown"``), ``.reason``, ``.symmetries``,
        ``.obstructions`` (with witnesses), ``.quotiented``, ``.jacobian``, ``.summary()``.

    Raises
    ------
    ValueError
        ``true_measure`` not a MixingMeasure, an unknown gate or activation, ``n_experts``
        below ``K*`` or not an integer, ``n_heads`` / ``n_tokens`` other than the truth's,
        an unknown level, or ``level="measure"`` for a gate other than ``"value"`` (with the
        reason).

    Examples
    --------
    >>> from hmoe_estim import random_measure
    >>> from hmoe_estim.metrics import identifiability_report
    >>> G = random_measure(1, 2, 2, 2, random_state=0)
    >>> rep = identifiability_report(G, gate="value", activation="tanh", n_experts=3)
    >>> rep.identifiable, [o.name for o in rep.obstructions]
    (False, ['token-split', 'token-regroup', 'null-atom'])
    >>> identifiability_report(G, gate="sdpa", activation="sigmoid", n_experts=3).identifiable
    True
    """
    from ._atoms import check_level

    K = _check_args(true_measure, gate, activation, n_experts, n_heads, n_tokens)
    check_level(level, gate)
    measure_level = level == "measure"
    Gs = true_measure.normalized()
    H, N, Ks, D = Gs.shape
    if isinstance(n_check, bool) or not isinstance(n_check, numbers.Integral) or n_check < 1:
        raise ValueError(f"n_check must be a positive integer; got {n_check!r}.")
    if not (isinstance(tol, numbers.Real) and 0 < tol < 1):
        raise ValueError(f"tol must be a number in (0, 1); got {tol!r}.")
    X = np.random.default_rng(random_state).uniform(-1.0, 1.0, size=(int(n_check), D))
    zero = PHI_AT_ZERO[activation] == 0.0
    linear = gate in ("none", "output")

    symmetries = [
        Symmetry("relabelling", "permuting heads, channels (per head) and tokens (per head)"),
        Symmetry("softmax-gauge", "adding one symmetric matrix to every M[h, i] of a head "
                 "(fixed by M[h, N-1] = 0, (A.3))"),
    ]
    if K > Ks:
        symmetries.append(Symmetry(
            "weight-splitting", "copies of one atom share its weight, and a zero-weight "
            "channel's experts are free (K > K*): the cell sums and ω-weighted atom terms "
            "of the Voronoi loss are 0 on them"))
    if gate in ("value", "sdpa") and activation in ODD_ACTIVATIONS:
        symmetries.append(Symmetry(
            "sign-flip", f"(ω, a) -> (−ω, −a) for an odd φ ({activation}): with ω >= 0 an "
            "over-specified fit can hold (ω* + c, a*) + (c, −a*); the metrics use signed atoms"))

    candidates = []
    if linear:
        what = "MHA" if gate == "none" else "G5 = φ(f_MHA), so every MHA alternative"
        candidates.append(("mha-fibre", _mha_fibre(Gs, K), H * (Ks + N * Ks * D - N * D),
                           f"{what}: only b[h, i] = Σ_k ω[h,k] a[h,i,k] is identified (the PDE "
                           "(5) of the paper); (ω, a) -> (tω, a/t), a redistribution of b over "
                           "channels, sign flips and all-zero channels keep f"))
        if H >= 2:
            candidates.append(("cross-head-linear", _cross_head(Gs, K), (H - 1) * D,
                               "Σ_i g[h,i] = 1 in every head, so c·x added to every b[h, i] of "
                               "one head and subtracted in another head cancels"))
    if gate == "value" and zero and N >= 2 and K >= Ks + 1:
        candidates.append(("token-split", _token_split(Gs, K), 0,
                           f"G2 with φ(0) = 0 ({activation}): ω Σ_i g_i φ(a_i·x) = "
                           "ω Σ_{i∈S} g_i φ(a_i·x) + ω Σ_{i∉S} g_i φ(a_i·x), a channel's "
                           "tokens split into two channels whose other experts are 0 (one "
                           "spare channel suffices)"))
    if gate == "value" and N >= 2 and Ks >= 2 and (K >= Ks + 1 or _regroup_pair(Gs)[0] == 0):
        candidates.append(("token-regroup", _token_regroup(Gs, K), 0,
                           "G2 = Σ_i g_i Σ_k ω_k φ(a_{i,k}·x) (any φ): channels only group the "
                           "weighted experts of each token, and with one spare channel two true "
                           "channels can exchange tokens: (ω_0; a_{0,0}, a_{i,1}), (ω_0; a_{0,1}, "
                           "a_{i,0}), (ω_1 − ω_0; a_{·,1}) for ω_0 <= ω_1 (no spare channel "
                           "needed when two weights are equal)"))
    if gate in ("value", "sdpa") and zero and K >= Ks + 1:
        candidates.append(("null-atom", _null_atom(Gs, K), 0,
                           f"φ(0) = 0 ({activation}): a channel whose experts are all 0 "
                           "contributes ω φ(0) = 0 whatever its weight ω"))
    obstructions, failed, quotiented = [], [], []
    from ..model import regression_function

    f_scale = max(1.0, float(np.max(np.abs(
        regression_function(Gs, X, gate=gate, activation=activation)))))
    for name, witness, dim, text in candidates:
        gap, loss = _check_witness(witness, Gs, gate, activation, X, level)
        if gap <= 1e-10 * f_scale and loss > 1e-8:
            obstructions.append(Obstruction(name, text, witness, dim, gap, loss))
        elif measure_level and gap <= 1e-10 * f_scale:  # same f, same measure: quotiented
            quotiented.append(Obstruction(name, text, witness, dim, gap, loss))
        else:  # a degenerate truth (zero or coinciding experts): never claim without a witness
            failed.append(f"the {name} witness failed its check here (|f − f*| = {gap:.1e}, "
                          f"Voronoi loss {loss:.1e}), so {name} is not claimed")

    # Jacobian at the truth, K = K*
    expected = int(sum(o.null_dimension for o in obstructions))
    jac = _spectrum_check(regression_jacobian(Gs, X, gate=gate, activation=activation), tol,
                          expected)
    null = jac.null_dimension
    qjac = None
    if measure_level:  # no continuous obstruction is named at the measure level: expect 0
        qjac = _spectrum_check(quotient_jacobian(Gs, X, activation=activation), tol, 0)

    notes = list(failed)
    issues = _assumption_issues(Gs)
    notes += issues
    if gate == "output" and activation in ("gelu", "silu"):
        notes.append(f"{activation} is not injective, so φ(f') = φ(f*) with f' ≠ f* cannot be "
                     "excluded either")
    if gate in ("value", "sdpa") and zero and K > Ks:
        notes.append("near a null atom ω φ(a·x) ≈ ω φ'(0) a·x trades ω against |a| as in MHA "
                     "(a near-degeneracy, not an exact alternative)")
    if gate in ("value", "sdpa") and activation == "sigmoid":
        notes.append("σ(z) + σ(−z) = 1: a pair (c, a) + (c, −a) adds the constant c, which no "
                     "channel can cancel while ω >= 0 (A.2); with signed weights it could")
    locally = jac.explained and not any(o.null_dimension for o in obstructions)
    if measure_level:
        locally = qjac.explained
        notes = [n for n in notes if not n.startswith("near a null atom")]
        if zero and K > Ks:
            notes.append(_NEAR_NULL_NOTE)
        if activation in ("gelu", "silu"):
            notes.append(_REFLECTION_NOTE)

    if measure_level:
        ident, reason = _measure_verdict(activation, obstructions, failed, qjac, issues, K, Ks)
    elif obstructions:
        ident = False
        reason = "exact alternative representation(s) with Voronoi loss > 0: " + ", ".join(
            o.name for o in obstructions)
    elif failed:
        ident = "unknown"
        reason = "; ".join(failed)
    elif not jac.explained:
        ident = "unknown"
        reason = (f"the Jacobian at the truth has {null} null direction(s), "
                  f"{null - expected} more than the named obstructions explain")
    elif issues:
        ident = "unknown"
        reason = "the truth violates the assumptions: " + "; ".join(issues)
    elif activation == "sigmoid":  # G1 any K; G2 with K = K* (else token-regroup applies)
        ident = True
        reason = ("no exact alternative representation (sigmoid: φ(0) ≠ 0, not odd), the "
                  "Jacobian at K = K* has no null direction (locally identifiable), and the "
                  "truth satisfies (A.2)-(A.5): the setting of the gated theory")
    else:
        ident = "unknown"
        reason = (f"no exact obstruction for {activation} with K = {K} and the Jacobian at "
                  "K = K* has no null direction beyond the quotiented symmetries (locally "
                  f"identifiable), but no global identifiability argument covers {activation}")
    near = []
    if search_near and gate == "value" and N >= 2 and Ks >= 2:
        near = _near_alternatives(Gs, gate, activation, K, X)
    return IdentifiabilityReport(gate, activation, K, (H, N, Ks, D), ident, reason,
                                 symmetries, obstructions, jac, bool(locally), notes, near,
                                 level=level, quotiented=quotiented, quotient_jacobian=qjac)


#: Obstructions each level quotients (their witnesses have loss 0 at that level).
QUOTIENTED = {"channel": (), "measure": ("token-regroup", "token-split", "null-atom")}

_NEAR_NULL_NOTE = (
    "near-null atoms (measure level): with φ(0) = 0 an atom (ω, ε a) adds ω φ(ε a·x) ≈ "
    "ε ω φ'(0) a·x to its token, so f moves by O(ε) while the atom's weight ω stays free; the "
    "atom is dropped only at ε = 0, so the measure-level loss has no bound by ‖f − f*‖ there")
_REFLECTION_NOTE = (
    "reflection (GELU, SiLU): φ(z) − φ(−z) = z, so a token's atoms {(w_k, a_k)} with "
    "Σ_k w_k a_k = 0 give the same f as {(w_k, −a_k)}; G* has such an exact alternative when "
    "its experts admit a zero-mean sub-combination with weights >= 0 (in a token, or with the "
    "same mean in every token of two heads), which this report does not search")


def _measure_verdict(activation, obstructions, failed, qjac, issues, K, Ks):
    """Verdict and reason at the measure level (G2)."""
    if obstructions:
        return False, ("exact alternative representation(s) with measure-level Voronoi loss "
                       "> 0: " + ", ".join(o.name for o in obstructions))
    if failed:
        return "unknown", "; ".join(failed)
    if not qjac.explained:
        return "unknown", (f"the Jacobian in the quotient (per-atom weights) has "
                           f"{qjac.null_dimension} null direction(s) at the truth")
    if issues:
        return "unknown", "the truth violates the assumptions: " + "; ".join(issues)
    local = ("the Jacobian in the quotient (per-atom weights, gates, experts) has full column "
             "rank at the truth (no first-order direction changes the measure and keeps f)")
    if activation == "sigmoid":
        return True, (
            "no exact alternative at the measure level (token-regroup quotiented); " + local
            + "; argument (a sketch, gates taken as identified): σ(z) = 1/2 + tanh(z/2)/2 and "
            "tanh units are linearly independent up to sign, so each token's expert measure is "
            "fixed up to pairs (c, a) + (c, −a), which add c g[h,i](x); these cancel only as "
            "one constant in every token of a head, summing to 0 over heads, impossible with "
            "ω >= 0 (A.2) unless c = 0; the setting of the gated theory")
    near_null = (", near-null atoms (K > K*) keep f within O(ε) at a measure-level loss "
                 "bounded below" if K > Ks else "")
    if activation == "tanh":
        return "unknown", (
            "the exact alternatives found (token-split, token-regroup, null-atom, sign flip) "
            "are quotiented and " + local + ", but φ(0) = 0" + near_null + ": no argument "
            "bounds the loss by the regression error")
    return "unknown", (
        f"the exact alternatives found are quotiented and {local}, but {activation} has the "
        "reflection φ(z) − φ(−z) = z (an exact alternative for truths whose experts admit a "
        "zero-mean sub-combination)" + near_null + ": no global argument")


# -- verdict records ------------------------------------------------------------------------
def verdict_label(record):
    """Short text of a verdict record: ``"identifiable"``, ``"not identifiable (token-split,
    null-atom)"`` or ``"identifiability unknown"``."""
    v = record.get("verdict")
    if v == "not identifiable":
        return "not identifiable (" + ", ".join(o["name"] for o in record["obstructions"]) + ")"
    if v == "identifiable":
        return "identifiable"
    return "identifiability unknown"


def measure_verdict_label(record):
    """Short text of a measure-level verdict record (``identifiability_report(...,
    level="measure").to_dict()``): ``"measure level: identifiable"``, ``"measure level:
    identifiability unknown"`` or ``"measure level: not identifiable (...)"``.

    Raises
    ------
    ValueError
        A record of the channel level (or written before levels existed): use
        :func:`verdict_label`.
    """
    level = record.get("level", "channel")
    if level != "measure":
        raise ValueError(f"the record is of the {level} level; measure_verdict_label reads "
                         "records of identifiability_report(..., level='measure'); use "
                         "verdict_label for the channel level.")
    return "measure level: " + verdict_label(record)
