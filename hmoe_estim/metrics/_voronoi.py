"""Voronoi cells and Voronoi losses ``L_{1,r}`` and ``L_2`` between mixing measures
(paper, Section 3; docs: Theory to code, "Voronoi cells and losses").

For a fitted measure ``G`` (channels ``(h', k')``) and the true ``G*`` (channels ``(h, k)``):

1. **Cells.** ``V[h,k]`` holds the fitted channels whose branch function
   ``f_G^{h',k'}(x) = Σ_i g[h',i](x) · expert[h',i,k'](x)`` is closest in ``L2`` (estimated on a
   reference sample ``X_ref``) to the true branch ``f_{G*}^{h,k}``.
2. **Token matching.** Inside a pair, fitted token ``π(i)`` is matched to true token ``i`` by
   the permutation minimising ``Σ_i ‖ΔM_i‖_F^e + ‖Δa_i‖^e`` *up to the softmax translation
   gauge*: ``ΔM_i = (M[h',π(i)] − M[h',π(N-1)]) − (M*[h,i] − M*[h,N-1])``,
   ``Δa_i = a[h',π(i),k'] − a*[h,i,k]`` (see ``hmoe_estim/metrics/_branches.py``).
3. **Loss.** ``Σ_{h,k} |Σ_{V[h,k]} ω[h',k'] − ω*[h,k]|``
   ``+ Σ_{h,k} Σ_{V[h,k]} ω[h',k'] Σ_i (‖ΔM_i‖_F^e + ‖Δa_i‖^e)`` with ``e = r`` for ``L_{1,r}``
   (paper, any integer ``r >= 1``) and, for ``L_2`` [reconstructed], ``e = 1`` in cells holding
   exactly one fitted channel and ``e = 2`` in cells holding more.
4. **Sign symmetry of an odd φ.** For ``gate="value"`` (G2) and ``gate="sdpa"`` (G1) with an
   odd activation (``tanh``), the channel ``(ω, a)`` computes the same as ``(−ω, −a)``. The
   metrics quotient it: a fitted channel may sit in a cell as the *signed atom* ``(s ω, s a)``,
   ``s = ±1``, chosen by the smaller of ``‖f_G^{h',k'} − f_{G*}^{h,k}‖`` and
   ``‖f_G^{h',k'} + f_{G*}^{h,k}‖``; the cell sums use the signed weights ``s ω`` and the atom
   terms ``|ω| Σ_i (‖ΔM_i‖^e + ‖s a_i − a*_i‖^e)``. So every point ``(ω* + c, a*) + (c, −a*)``
   of the continuum of an over-specified tanh fit has loss 0 (see
   :func:`hmoe_estim.metrics.identifiability_report`). Other activations and gates: ``s = 1``.

Why one module of this size: the cells, the token matching inside a pair and the loss's parts
are one computation (the loss reuses the cells' matching); half of the length is the docstrings
that state the formulas.
"""

from dataclasses import dataclass, field

import numpy as np

from .._names import ODD_ACTIVATIONS
from .._validation import check_activation, check_gate, check_r, check_token_matching
from ._atoms import atom_cells, check_level, measure_details
from ._branches import (
    DEFAULT_N_REF,
    branch_distances,
    branch_functions,
    check_measure_pair,
    match_tokens,
    reference_sample,
    resolve_expert,
    token_cost_tables,
)

__all__ = [
    "VoronoiCells", "VoronoiDetails", "sign_symmetric", "voronoi_cells",
    "voronoi_loss",
]


def sign_symmetric(gate, activation, sign_symmetry="auto"):
    """Whether the metrics quotient the channel sign flip ``(ω, a) -> (−ω, −a)``.

    ``"auto"``: for the gates ``"value"`` (G2) and ``"sdpa"`` (G1) with an odd activation
    (:data:`ODD_ACTIVATIONS`), where the flip leaves the regression function unchanged
    (``ω φ(u) = (−ω) φ(−u)``). ``True`` / ``False`` force it on / off.

    Raises
    ------
    ValueError
        ``sign_symmetry`` not ``"auto"``, ``True`` or ``False``.
    """
    if isinstance(sign_symmetry, str) and sign_symmetry == "auto":
        return gate in ("value", "sdpa") and activation in ODD_ACTIVATIONS
    if isinstance(sign_symmetry, (bool, np.bool_)):
        return bool(sign_symmetry)
    raise ValueError(
        f"sign_symmetry must be 'auto', True or False; got {sign_symmetry!r}. 'auto' quotients "
        "the sign flip (ω, a) -> (−ω, −a) for G1/G2 with an odd activation (tanh)."
    )


@dataclass
class VoronoiCells:
    """Voronoi cells of a fitted measure around the true channels.

    Attributes
    ----------
    assignment : ndarray of shape (H, K, 2), int
        ``assignment[h', k'] = (h, k)``: the true channel whose cell holds fitted ``(h', k')``.
    members : list of list of list of tuple
        ``members[h][k]`` = the fitted channels ``(h', k')`` in ``V[h, k]`` (row-major order);
        empty for an empty cell.
    sizes : ndarray of shape (H*, K*), int
        ``|V[h, k]|``.
    distances : ndarray of shape (H, K, H*, K*)
        ``‖f_G^{h',k'} − f_{G*}^{h,k}‖_{L2}`` estimated on the reference sample.
        With the sign symmetry, the smaller of ``‖f_G^{h',k'} ∓ f_{G*}^{h,k}‖``.
    expert : str
        The expert reading of the branch functions, ``"linear"`` (``a·x``) or
        ``"activated"`` (``φ(a·x)``).
    n_ref : int
        Size of the reference sample.
    pair_signs : ndarray of shape (H, K, H*, K*), int
        ``+1``, or ``−1`` when fitted ``(h', k')`` is nearer to true ``(h, k)`` as the signed
        atom ``(−ω, −a)`` (only with the sign symmetry; ties go to ``+1``).
    signs : ndarray of shape (H, K), int
        ``pair_signs`` at the cell that holds each fitted channel.
    sign_symmetric : bool
        Whether the sign symmetry was quotiented.
    """

    assignment: np.ndarray
    members: list
    sizes: np.ndarray
    distances: np.ndarray
    expert: str
    n_ref: int
    pair_signs: np.ndarray = None
    signs: np.ndarray = None
    sign_symmetric: bool = False

    def __post_init__(self):
        H, K = self.distances.shape[:2]
        if self.pair_signs is None:
            self.pair_signs = np.ones(self.distances.shape, dtype=np.intp)
        if self.signs is None:
            self.signs = np.ones((H, K), dtype=np.intp)

    def __getitem__(self, key):
        """``cells[h, k]`` = list of fitted channels in ``V[h, k]``."""
        h, k = key
        return self.members[h][k]


@dataclass
class VoronoiDetails:
    """Parts of a Voronoi loss, returned by ``voronoi_loss(..., return_details=True)``.

    Attributes
    ----------
    loss : float
        ``weight_part + exact_part + over_part``.
    weight_part : float
        ``Σ_{h,k} |Σ_{V[h,k]} s ω[h',k'] − ω*[h,k]|`` (empty cells contribute ``|0 − ω*|``;
        ``s = ±1`` is the sign of the atom, 1 without the sign symmetry).
    exact_part : float
        Parameter term summed over cells holding exactly one fitted channel.
    over_part : float
        Parameter term summed over cells holding two or more fitted channels.
    r : int or None
        ``r`` of ``L_{1,r}``; ``None`` for ``L_2``.
    cells : VoronoiCells
    cell_weights : ndarray of shape (H*, K*)
        ``Σ_{V[h,k]} s ω[h',k']`` (signed weights).
    cell_exponents : ndarray of shape (H*, K*), int
        Exponent ``e`` used in each cell (0 for an empty cell).
    atom_terms : ndarray of shape (H, K)
        ``|ω[h',k']| Σ_i (‖ΔM_i‖^e + ‖Δa_i‖^e)`` of each fitted channel (``Δa_i`` of the
        signed atom ``s a``).
    atom_distances : ndarray of shape (H, K)
        ``Σ_i (‖ΔM_i‖^e + ‖Δa_i‖^e)`` of each fitted channel (without its weight).
    token_permutations : ndarray of shape (H, K, N), int
        ``token_permutations[h', k', i]`` = fitted token matched to true token ``i``.
    extra_atoms : list of tuple
        Fitted channels in over-specified cells other than the cell's heaviest one.
    extra_weights : ndarray
        Their weights ``ω[h', k']``, in the order of ``extra_atoms``.
    """

    loss: float
    weight_part: float
    exact_part: float
    over_part: float
    r: object
    cells: VoronoiCells
    cell_weights: np.ndarray
    cell_exponents: np.ndarray
    atom_terms: np.ndarray
    atom_distances: np.ndarray
    token_permutations: np.ndarray
    extra_atoms: list = field(default_factory=list)
    extra_weights: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __float__(self):
        return float(self.loss)


def voronoi_cells(
    measure,
    true_measure,
    *,
    gate="none",
    activation="sigmoid",
    X_ref=None,
    n_ref=DEFAULT_N_REF,
    random_state=0,
    expert="auto",
    sign_symmetry="auto",
    level="channel",
):
    """Assign each fitted channel ``(h', k')`` to the Voronoi cell of a true channel ``(h, k)``.

    Implements the Voronoi cells of the paper's Section 3: ``(h', k') ∈ V[h, k]`` when the
    branch function
    ``f_G^{h',k'}(x) = Σ_i g[h',i](x) · expert[h',i,k'](x)`` is closer in ``L2`` to
    ``f_{G*}^{h,k}`` than to any other true branch. The norm is estimated on a reference
    sample; ties go to the first true channel in row-major ``(h, k)`` order.

    Parameters
    ----------
    measure : MixingMeasure
        Fitted ``G`` of shape ``(H, N, K, D)``.
    true_measure : MixingMeasure
        True ``G*`` of shape ``(H*, N*, K*, D)``; ``H*`` and ``K*`` may differ from ``H`` and
        ``K``, the input dimension ``D`` may not.
    gate : {"none", "value", "sdpa", "output"}, default="none"
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
    X_ref : array-like of shape (n_ref, D), optional
        Reference sample. Default: ``n_ref`` points uniform on ``[-1, 1]^D`` drawn with
        ``numpy.random.default_rng(random_state)``.
    n_ref : int, default=4096
    random_state : int, default=0
    expert : {"auto", "linear", "activated"}, default="auto"
        Expert inside the branch: ``"auto"`` is the function the token gate mixes — ``a·x``
        for ``"none"``, ``"sdpa"``, ``"output"`` and ``φ(a·x)`` for ``"value"``.
    sign_symmetry : {"auto", True, False}, default="auto"
        Quotient the channel sign flip ``(ω, a) -> (−ω, −a)``: the distance of a fitted
        branch to a true one is ``min(‖B − B*‖, ‖B + B*‖)`` and the sign that attains it is
        kept (``.pair_signs``, ``.signs``). ``"auto"``: for G1/G2 with an odd activation
        (tanh), where the flip is an exact symmetry (``voronoi.sign_symmetric``).
    level : {"channel", "measure"}, default="channel"
        ``"channel"``: cells over the value channels ``(h', k')`` (the paper's construction).
        ``"measure"``: cells over the atoms ``(M[h,i], a[h,i,k])`` of the mixing measure,
        coinciding atoms merged and null atoms dropped; ``gate="value"`` (G2) only, where
        ``f`` is a sum over atoms (docs: Metrics and scorers, "Channel and measure
        readings"). Returns an :class:`~hmoe_estim.metrics._atoms.AtomCells`.

    Returns
    -------
    VoronoiCells or AtomCells
        ``.assignment`` (H, K, 2), ``.members[h][k]``, ``.sizes`` (H*, K*), ``.distances``,
        ``.signs``; at ``level="measure"`` the same indexed by atoms (``.atoms``,
        ``.true_atoms``).

    Raises
    ------
    ValueError
        Measures with different ``D`` (or ``N`` at ``level="measure"``) or a bad ``X_ref``,
        gate, activation, expert or level; ``level="measure"`` for a gate other than
        ``"value"``, with the reason.
    """
    check_gate(gate)
    check_activation(activation)
    check_level(level, gate)
    check_measure_pair(measure, true_measure, same_tokens=level == "measure")
    reading = resolve_expert(gate, expert)
    signed = sign_symmetric(gate, activation, sign_symmetry)
    X = reference_sample(measure.n_features, X_ref, n_ref=n_ref, random_state=random_state)
    if level == "measure":
        return atom_cells(measure, true_measure, X, activation=activation, expert=reading,
                          signed=signed)
    B = branch_functions(measure, X, activation=activation, gate=gate, expert=reading)
    B_star = branch_functions(true_measure, X, activation=activation, gate=gate, expert=reading)
    dist = branch_distances(B, B_star)
    pair_signs = np.ones(dist.shape, dtype=np.intp)
    if signed:  # the branch of the flipped channel (−a) is −B (φ odd, or the linear reading)
        dist_flip = branch_distances(-B, B_star)
        pair_signs[dist_flip < dist] = -1
        dist = np.minimum(dist, dist_flip)
    H, K = measure.omega.shape
    Hs, Ks = true_measure.omega.shape
    flat = np.argmin(dist.reshape(H, K, Hs * Ks), axis=2)
    assignment = np.stack(np.unravel_index(flat, (Hs, Ks)), axis=-1).astype(np.intp)
    signs = pair_signs[np.arange(H)[:, None], np.arange(K)[None, :],
                       assignment[..., 0], assignment[..., 1]]
    members = [[[] for _ in range(Ks)] for _ in range(Hs)]
    for hp in range(H):
        for kp in range(K):
            h, k = assignment[hp, kp]
            members[h][k].append((hp, kp))
    sizes = np.array([[len(members[h][k]) for k in range(Ks)] for h in range(Hs)], dtype=np.intp)
    return VoronoiCells(assignment, members, sizes, dist, reading, X.shape[0],
                        pair_signs=pair_signs, signs=signs, sign_symmetric=signed)


def _match_atom(measure, M_true_normalized, true_measure, hp, kp, h, k, exponent, method,
                sign=1):
    cost_M, cost_a = token_cost_tables(
        measure.M[hp], sign * measure.a[hp, :, kp], M_true_normalized[h], true_measure.a[h, :, k],
        exponent,
    )
    return match_tokens(cost_M, cost_a, method=method)


def _voronoi_details(measure, true_measure, cells, r, token_matching):
    """All parts of the loss from precomputed cells (shared with the expert error)."""
    H, N, K, _ = measure.shape
    Hs, _, Ks, _ = true_measure.shape
    M_true = true_measure.normalized().M
    omega = measure.omega
    cell_weights = np.zeros((Hs, Ks))
    exponents = np.zeros((Hs, Ks), dtype=np.intp)
    atom_terms = np.zeros((H, K))
    atom_dist = np.zeros((H, K))
    perms = np.zeros((H, K, N), dtype=np.intp)
    exact = over = 0.0
    extra_atoms, extra_weights = [], []
    for h in range(Hs):
        for k in range(Ks):
            members = cells.members[h][k]
            size = len(members)
            if size == 0:
                continue
            e = r if r is not None else (1 if size == 1 else 2)
            exponents[h, k] = e
            for hp, kp in members:
                sign = int(cells.signs[hp, kp])  # signed atom (s ω, s a); s = 1 unless odd φ
                perm, cost = _match_atom(
                    measure, M_true, true_measure, hp, kp, h, k, e, token_matching, sign
                )
                perms[hp, kp] = perm
                atom_dist[hp, kp] = cost
                atom_terms[hp, kp] = abs(omega[hp, kp]) * cost
                cell_weights[h, k] += sign * omega[hp, kp]
                if size == 1:
                    exact += atom_terms[hp, kp]
                else:
                    over += atom_terms[hp, kp]
            if size > 1:
                w = np.array([abs(omega[m]) for m in members])
                heaviest = int(np.argmax(w))
                for j, m in enumerate(members):
                    if j != heaviest:
                        extra_atoms.append(m)
                        extra_weights.append(w[j])
    weight_part = float(np.abs(cell_weights - true_measure.omega).sum())
    return VoronoiDetails(
        loss=weight_part + exact + over,
        weight_part=weight_part,
        exact_part=float(exact),
        over_part=float(over),
        r=r,
        cells=cells,
        cell_weights=cell_weights,
        cell_exponents=exponents,
        atom_terms=atom_terms,
        atom_distances=atom_dist,
        token_permutations=perms,
        extra_atoms=extra_atoms,
        extra_weights=np.array(extra_weights, dtype=np.float64),
    )


def voronoi_loss(
    measure,
    true_measure,
    *,
    gate="none",
    activation="sigmoid",
    r=None,
    X_ref=None,
    return_details=False,
    n_ref=DEFAULT_N_REF,
    random_state=0,
    expert="auto",
    token_matching="auto",
    sign_symmetry="auto",
    level="channel",
):
    """Voronoi loss ``L_{1,r}(G, G*)`` or ``L_2(G, G*)`` between a fitted and the true measure.

    Implements the Voronoi loss of the paper's Section 3::

        L = Σ_{h,k} |Σ_{(h',k') ∈ V[h,k]} ω[h',k'] − ω*[h,k]|
          + Σ_{h,k} Σ_{(h',k') ∈ V[h,k]} ω[h',k'] Σ_i (‖ΔM_i‖_F^e + ‖Δa_i‖^e)

    with ``e = r`` (``L_{1,r}``) or, for ``r=None`` (``L_2``, [reconstructed]), ``e = 1`` in
    cells holding exactly one fitted channel and ``e = 2`` in cells holding more. Cells come
    from :func:`voronoi_cells`. Inside a pair, tokens are matched by the permutation ``π`` that
    minimises the cell's own term ``Σ_i ‖ΔM_i‖_F^e + ‖Δa_i‖^e`` with the gauge-fixed
    ``ΔM_i = (M[h',π(i)] − M[h',π(N-1)]) − (M*[h,i] − M*[h,N-1])`` and
    ``Δa_i = a[h',π(i),k'] − a*[h,i,k]``: the loss is invariant to relabelling heads, channels
    and tokens and to the softmax translation gauge of either measure, and is exactly 0 at
    ``G = G*``. For G1 and G2 with an odd activation (tanh) it also quotients the channel sign
    flip ``(ω, a) -> (−ω, −a)``: a fitted channel enters its cell as the signed atom
    ``(s ω, s a)``, the cell sum is ``Σ s ω`` and the atom term ``|ω| Σ_i (‖ΔM_i‖^e +
    ‖s a_i − a*_i‖^e)``, so the loss is 0 on the whole continuum ``(ω* + c, a*) + (c, −a*)``.

    Parameters
    ----------
    measure : MixingMeasure
        Fitted ``G``, shape ``(H, N, K, D)``.
    true_measure : MixingMeasure
        True ``G*``, shape ``(H*, N, K*, D)``: same ``N`` and ``D``; ``H*``, ``K*`` may differ.
    gate : {"none", "value", "sdpa", "output"}, default="none"
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
        Model of the branch functions (cells only).
    r : int >= 1 or None, default=None
        ``None`` gives ``L_2``; an integer gives ``L_{1,r}``.
    X_ref : array-like of shape (n_ref, D), optional
        Reference sample of the cells. Default: ``n_ref`` points uniform on ``[-1, 1]^D``.
    return_details : bool, default=False
        Return a :class:`VoronoiDetails` (loss, weight / exactly-specified / over-specified
        parts, cells, cell weights, extra atoms' weights, token permutations) instead of a float.
    n_ref : int, default=4096
    random_state : int, default=0
        Seed of the default reference sample.
    expert : {"auto", "linear", "activated"}, default="auto"
        Expert reading of the branch functions (see :func:`voronoi_cells`).
    token_matching : {"auto", "enumerate", "hungarian"}, default="auto"
        ``"enumerate"`` tries all ``N!`` permutations; ``"hungarian"`` loops over the fitted
        token matched to the true last token (which fixes the gauge and makes the cost
        separable) and solves the rest with :func:`scipy.optimize.linear_sum_assignment`. Both
        are exact; ``"auto"`` enumerates for ``N <= 6``.
    sign_symmetry : {"auto", True, False}, default="auto"
        Quotient the channel sign flip (see :func:`voronoi_cells`); ``"auto"`` does so for
        G1/G2 with tanh and nowhere else, so sigmoid, GELU and SiLU losses are unchanged.
    level : {"channel", "measure"}, default="channel"
        ``"channel"``: the cells hold value channels (above). ``"measure"``: the same
        construction over the atoms ``(M[h,i], a[h,i,k])`` with weight ``ω[h,k]`` of the
        paper's mixing measure — atoms of a head that coincide merged (weights summed), null
        atoms (``φ(0) = 0`` and ``a = 0``) and zero-weight atoms dropped, cells around the true
        atoms by the ``L2`` distance of the atom branches ``g[h,i](x) φ(a·x)``, and
        ``Σ_j |Σ_{V_j} s ω − ω*_j| + Σ_j Σ_{V_j} |ω| (‖ΔM‖_F^e + ‖s a − a*‖^e)`` with the same
        exponents. It is 0 on the token-regroup and token-split alternatives of G2, which
        have the same measure as ``G*``. ``gate="value"`` (G2) only: for G1, MHA and G5 the
        measure does not determine ``f`` and the level is refused with the reason (docs:
        Metrics and scorers, "Channel and measure readings").

    Returns
    -------
    float, VoronoiDetails or MeasureVoronoiDetails

    Raises
    ------
    ValueError
        ``r`` not an integer ``>= 1``; measures with different ``D`` or ``N``; ``X_ref`` of the
        wrong width; unknown gate, activation, expert reading, token matching or level;
        ``level="measure"`` for a gate other than ``"value"`` (with the reason).

    Examples
    --------
    >>> import numpy as np
    >>> from hmoe_estim import MixingMeasure, voronoi_loss
    >>> M = np.zeros((1, 2, 2, 2)); M[0, 0] = np.eye(2)
    >>> G = MixingMeasure([[1.0]], M, np.arange(4.0).reshape(1, 2, 1, 2))
    >>> voronoi_loss(G, G)
    0.0
    """
    r = check_r(r)
    check_token_matching(token_matching)
    check_gate(gate)
    check_activation(activation)
    check_level(level, gate)
    check_measure_pair(measure, true_measure, same_tokens=True)
    cells = voronoi_cells(
        measure,
        true_measure,
        gate=gate,
        activation=activation,
        X_ref=X_ref,
        n_ref=n_ref,
        random_state=random_state,
        expert=expert,
        sign_symmetry=sign_symmetry,
        level=level,
    )
    if level == "measure":
        details = measure_details(measure, true_measure, cells, r, token_matching)
    else:
        details = _voronoi_details(measure, true_measure, cells, r, token_matching)
    return details if return_details else float(details.loss)
