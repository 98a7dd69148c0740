"""The measure-level reading of the metrics: atoms of a mixing measure, their Voronoi cells and
the Voronoi loss over atoms (docs: Metrics and scorers, "Channel and measure readings").

The paper defines the mixing measure as a measure over atoms,
``G = Σ_h Σ_k ω[h,k] Σ_i δ_{(M[h,i], a[h,i,k])}`` (Section 3). For G2 (``gate="value"``,
eq. (9)) the regression function is a sum over atoms,

``f_G(x) = Σ_h Σ_i g[h,i](x) Σ_k ω[h,k] φ(a[h,i,k]·x) = Σ_atoms ω · b_atom(x)``,
``b_(h,i,a)(x) = g[h,i](x) φ(a·x)``,

so ``f`` depends on each head's gate and, token by token, on the expert measure
``Σ_k ω[h,k] δ_{a[h,i,k]}`` — not on how the atoms are grouped into channels. The
*measure level* (``level="measure"``) reads the Voronoi construction of the paper over these
atoms instead of over channels:

1. **Atoms.** Atom ``(h, i, k)`` is ``(M[h,i], a[h,i,k])`` with weight ``ω[h,k]``. Atoms of one
   head that coincide — ``‖M[h,i] − M[h,j]‖_F <= tol`` and ``‖a − a'‖ <= tol``, chained — are
   merged (weights summed; the merged atom keeps the parameters of its heaviest member).
   Atoms of different heads are never merged: the gate ``g[h,i]`` normalises over the head's
   own tokens, so the head is part of the atom. Then *null atoms*, whose branch vanishes
   (``φ(0) = 0`` and ``‖a‖ <= tol``), and atoms whose merged weight is ``|ω| <= tol``, are
   dropped: they are not atoms of the measure. ``tol`` is :data:`ATOM_TOL` (absolute; the
   parameters live in a bounded box, assumption (A.1)).
2. **Cells.** A fitted atom lies in the cell of the true atom whose branch ``b`` is nearest in
   ``L2`` (reference sample), as for channels; with the sign symmetry of G2 with tanh, the
   signed atom ``(−ω, −a)`` may be nearer (distance ``min ‖b ∓ b*‖``).
3. **Loss.** ``Σ_j |Σ_{l ∈ V_j} s_l ω_l − ω*_j| + Σ_j Σ_{l ∈ V_j} |ω_l| (‖ΔM_l‖_F^e +
   ‖s_l a_l − a*_j‖^e)``, ``e = r`` (``L_{1,r}``) or, for ``L_2``, 1 in a cell holding one
   fitted atom and 2 in a cell holding more. ``ΔM_l = (M[h',i'] − M[h',π(N-1)]) − (M*[h,i] −
   M*[h,N-1])``: the softmax translation gauge of the fitted head ``h'`` is fixed against the
   true head ``h`` by the token permutation ``π`` that matches their gate matrices
   (``Σ_i ‖ΔM_i‖_F`` minimal, as in the channel reading without the experts).

With ``N = 1`` the gate is constant, every channel is one atom, and the two levels agree
(tested). The level is defined for ``gate="value"`` only (:data:`MEASURE_GATES`); the other
gates are refused with the reason (:func:`check_level`).

Why one module of this size: the atoms, their cells and the loss over them are one
computation, shared by :func:`hmoe_estim.voronoi_loss`, :func:`hmoe_estim.voronoi_cells` and
:func:`hmoe_estim.metrics.expert_error` at ``level="measure"``.
"""

from dataclasses import dataclass, field

import numpy as np

from ._branches import branch_distances, match_tokens, phi, token_cost_tables, token_gate
from ._identifiability import PHI_AT_ZERO

__all__ = [
    "ATOM_TOL", "LEVELS", "MEASURE_GATES", "Atoms", "AtomCells", "MeasureVoronoiDetails",
    "check_level", "measure_atoms",
]

#: The two levels of the Voronoi loss and the expert error.
LEVELS = ("channel", "measure")
#: Gates whose regression function is determined by the atom measure.
MEASURE_GATES = ("value",)
#: Absolute tolerance for merging coinciding atoms and dropping null or zero-weight atoms.
ATOM_TOL = 1e-9

_WHY_NOT = {
    "none": "for MHA, f(x) = Σ_h Σ_i g[h,i](x) b[h,i]·x depends on the atoms only through "
            "b[h,i] = Σ_k ω[h,k] a[h,i,k] (the mha-fibre), so f determines no measure of atoms",
    "output": "for G5, f = φ(f_MHA) depends on the atoms only through b[h,i] = Σ_k ω[h,k] "
              "a[h,i,k] (the mha-fibre of MHA), so f determines no measure of atoms",
    "sdpa": "for G1, f(x) = Σ_h Σ_k ω[h,k] φ(Σ_i g[h,i](x) a[h,i,k]·x) applies φ to a "
            "channel's sum over tokens, so f depends on how the atoms are grouped into "
            "channels (regrouping the tokens of two channels keeps the measure and changes f)",
}


def check_level(level, gate=None):
    """Return ``level`` if it is ``"channel"`` or ``"measure"`` and ``gate`` supports it.

    Raises
    ------
    ValueError
        An unknown level (naming the valid values), or ``level="measure"`` with a gate other
        than ``"value"`` (G2), with the reason the measure does not determine ``f`` there.
    """
    if not isinstance(level, str) or level not in LEVELS:
        raise ValueError(
            f"Unknown level {level!r}. Use 'channel' (Voronoi cells over value channels, the "
            "default) or 'measure' (cells over the atoms (M[h,i], a[h,i,k]) of the mixing "
            "measure, gate='value' only)."
        )
    if level == "measure" and gate is not None and gate not in MEASURE_GATES:
        raise ValueError(
            f"level='measure' is not defined for gate={gate!r}: {_WHY_NOT[gate]}. The measure "
            "level is defined for gate='value' (G2), where f = Σ_h Σ_i g[h,i] Σ_k ω[h,k] "
            "φ(a[h,i,k]·x) is a sum over atoms; use level='channel' for this gate."
        )
    return level


@dataclass
class Atoms:
    """The atoms of a mixing measure after merging and dropping (see the module docstring).

    Attributes
    ----------
    head, token : ndarray of shape (L,), int
        Head and (representative) token of each atom.
    weight : ndarray of shape (L,)
        Summed weight of the merged atom.
    a : ndarray of shape (L, D)
        Expert of the atom.
    members : list of list of tuple
        ``members[l]`` = the ``(h, i, k)`` merged into atom ``l``.
    dropped : list of tuple
        ``(h, i, k)`` of null atoms and of atoms whose merged weight is 0 (within ``tol``).
    """

    head: np.ndarray
    token: np.ndarray
    weight: np.ndarray
    a: np.ndarray
    members: list
    dropped: list = field(default_factory=list)

    def __len__(self):
        return int(self.weight.shape[0])


def measure_atoms(measure, *, activation="sigmoid", tol=ATOM_TOL):
    """The atoms ``(M[h,i], a[h,i,k])`` of ``measure`` with weights ``ω[h,k]``, merged and
    pruned (coinciding atoms of one head merged, null and zero-weight atoms dropped).

    Parameters
    ----------
    measure : MixingMeasure
    activation : str
        Decides whether ``a = 0`` is a null atom (``φ(0) = 0``: tanh, GELU, SiLU).
    tol : float, default=ATOM_TOL

    Returns
    -------
    Atoms
    """
    G = measure.normalized()
    H, N, K, D = G.shape
    null_possible = PHI_AT_ZERO[activation] == 0.0
    head, token, weight, a, members, dropped = [], [], [], [], [], []
    for h in range(H):
        items = [(i, k) for i in range(N) for k in range(K)]
        parent = list(range(len(items)))

        def find(p):
            while parent[p] != p:
                parent[p] = parent[parent[p]]
                p = parent[p]
            return p

        for p, (i, k) in enumerate(items):
            for q in range(p + 1, len(items)):
                j, l2 = items[q]
                if (np.linalg.norm(G.M[h, i] - G.M[h, j]) <= tol
                        and np.linalg.norm(G.a[h, i, k] - G.a[h, j, l2]) <= tol):
                    rp, rq = find(p), find(q)
                    if rp != rq:
                        parent[max(rp, rq)] = min(rp, rq)
        groups = {}
        for p in range(len(items)):
            groups.setdefault(find(p), []).append(items[p])
        for root in sorted(groups):
            group = groups[root]
            w = np.array([G.omega[h, k] for _, k in group])
            i, k = group[int(np.argmax(np.abs(w)))]
            total = float(w.sum())
            full = [(h, ii, kk) for ii, kk in group]
            if (null_possible and np.linalg.norm(G.a[h, i, k]) <= tol) or abs(total) <= tol:
                dropped += full
                continue
            head.append(h)
            token.append(i)
            weight.append(total)
            a.append(G.a[h, i, k])
            members.append(full)
    return Atoms(np.array(head, dtype=np.intp), np.array(token, dtype=np.intp),
                 np.array(weight, dtype=np.float64), np.array(a, dtype=np.float64).reshape(-1, D),
                 members, dropped)


def atom_branches(measure, atoms, X, *, activation="sigmoid", expert="activated"):
    """Branches ``b_l(x) = g[h_l, i_l](x) · expert(a_l·x)`` of the atoms, shape ``(n, L)``."""
    g = token_gate(measure.normalized(), X)
    z = X @ atoms.a.T
    e = phi(activation, z) if expert == "activated" else z
    return g[:, atoms.head, atoms.token] * e


@dataclass
class AtomCells:
    """Voronoi cells of the fitted atoms around the true atoms (``level="measure"``).

    Attributes
    ----------
    atoms, true_atoms : Atoms
        Fitted (``L``) and true (``L*``) atoms.
    assignment : ndarray of shape (L,), int
        True atom whose cell holds each fitted atom.
    members : list of list of int
        ``members[j]`` = fitted atoms in the cell of true atom ``j``.
    sizes : ndarray of shape (L*,), int
    distances : ndarray of shape (L, L*)
        ``‖b_l − b*_j‖_{L2}`` (with the sign symmetry, the smaller of ``‖b_l ∓ b*_j‖``).
    pair_signs : ndarray of shape (L, L*), int
    signs : ndarray of shape (L,), int
        ``pair_signs`` at each fitted atom's cell.
    expert : str
    n_ref : int
    sign_symmetric : bool
    level : str
        ``"measure"``.
    """

    atoms: Atoms
    true_atoms: Atoms
    assignment: np.ndarray
    members: list
    sizes: np.ndarray
    distances: np.ndarray
    pair_signs: np.ndarray
    signs: np.ndarray
    expert: str
    n_ref: int
    sign_symmetric: bool = False
    level: str = "measure"

    def __getitem__(self, j):
        """``cells[j]`` = fitted atoms in the cell of true atom ``j``."""
        return self.members[j]


def atom_cells(measure, true_measure, X, *, activation, expert, signed, tol=ATOM_TOL):
    """Assign the fitted atoms to the cells of the true atoms (validated inputs)."""
    A = measure_atoms(measure, activation=activation, tol=tol)
    As = measure_atoms(true_measure, activation=activation, tol=tol)
    if len(As) == 0:
        raise ValueError(
            "true_measure has no atom at the measure level: every atom is null (a = 0 with "
            "φ(0) = 0) or has zero weight, so f* = 0 and there is no cell to read."
        )
    B = atom_branches(measure, A, X, activation=activation, expert=expert)
    Bs = atom_branches(true_measure, As, X, activation=activation, expert=expert)
    dist = branch_distances(B[:, :, None], Bs[:, :, None])[:, 0, :, 0]
    pair_signs = np.ones(dist.shape, dtype=np.intp)
    if signed:  # φ odd: the atom (−ω, −a) has the branch −b
        dist_flip = branch_distances(-B[:, :, None], Bs[:, :, None])[:, 0, :, 0]
        pair_signs[dist_flip < dist] = -1
        dist = np.minimum(dist, dist_flip)
    L, Ls = dist.shape
    assignment = np.argmin(dist, axis=1).astype(np.intp) if L else np.zeros(0, np.intp)
    signs = pair_signs[np.arange(L), assignment] if L else np.zeros(0, np.intp)
    members = [[] for _ in range(Ls)]
    for lp in range(L):
        members[assignment[lp]].append(lp)
    sizes = np.array([len(m) for m in members], dtype=np.intp)
    return AtomCells(A, As, assignment, members, sizes, dist, pair_signs, signs, expert,
                     X.shape[0], sign_symmetric=signed)


@dataclass
class MeasureVoronoiDetails:
    """Parts of the measure-level Voronoi loss (``voronoi_loss(..., level="measure",
    return_details=True)``); the names follow :class:`hmoe_estim.metrics.VoronoiDetails`,
    indexed by atoms instead of channels.

    Attributes
    ----------
    loss, weight_part, exact_part, over_part : float
        ``loss = weight_part + exact_part + over_part``; the parameter term summed over cells
        holding one fitted atom (``exact_part``) and more (``over_part``).
    r : int or None
    cells : AtomCells
    cell_weights : ndarray of shape (L*,)
        ``Σ_{V_j} s ω`` (signed weights).
    cell_exponents : ndarray of shape (L*,), int
        Exponent ``e`` of each cell (0 for an empty cell).
    atom_terms : ndarray of shape (L,)
        ``|ω_l| (‖ΔM_l‖_F^e + ‖s_l a_l − a*_j‖^e)``.
    atom_distances : ndarray of shape (L,)
        The same without the weight.
    gauges : dict
        ``gauges[(h', h)]`` = token permutation matching the gate of fitted head ``h'`` to
        true head ``h`` (``perm[i]`` = fitted token matched to true token ``i``).
    extra_atoms : list of int
        Fitted atoms in over-specified cells other than the cell's heaviest one.
    extra_weights : ndarray
        Their weights.
    level : str
        ``"measure"``.
    """

    loss: float
    weight_part: float
    exact_part: float
    over_part: float
    r: object
    cells: AtomCells
    cell_weights: np.ndarray
    cell_exponents: np.ndarray
    atom_terms: np.ndarray
    atom_distances: np.ndarray
    gauges: dict
    extra_atoms: list = field(default_factory=list)
    extra_weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    level: str = "measure"

    def __float__(self):
        return float(self.loss)


def measure_details(measure, true_measure, cells, r, token_matching):
    """All parts of the measure-level loss from precomputed :class:`AtomCells`."""
    G, Gs = measure.normalized(), true_measure.normalized()
    N, D = G.n_tokens, G.n_features
    A, As = cells.atoms, cells.true_atoms
    L, Ls = len(A), len(As)
    gauges = {}

    def reference_token(hp, h):
        if (hp, h) not in gauges:
            zeros = np.zeros((N, D))
            cost_M, cost_a = token_cost_tables(G.M[hp], zeros, Gs.M[h], zeros, 1)
            gauges[(hp, h)], _ = match_tokens(cost_M, cost_a, method=token_matching)
        return int(gauges[(hp, h)][N - 1])

    cell_weights = np.zeros(Ls)
    exponents = np.zeros(Ls, dtype=np.intp)
    atom_terms = np.zeros(L)
    atom_dist = np.zeros(L)
    exact = over = 0.0
    extra_atoms, extra_weights = [], []
    for j in range(Ls):
        members = cells.members[j]
        size = len(members)
        if size == 0:
            continue
        e = r if r is not None else (1 if size == 1 else 2)
        exponents[j] = e
        h, i = As.head[j], As.token[j]
        for lp in members:
            hp, ip = A.head[lp], A.token[lp]
            s = int(cells.signs[lp])
            dM = (G.M[hp, ip] - G.M[hp, reference_token(hp, h)]) - Gs.M[h, i]
            da = s * A.a[lp] - As.a[j]
            cost = float(np.sqrt(np.sum(dM * dM)) ** e + np.sqrt(np.sum(da * da)) ** e)
            atom_dist[lp] = cost
            atom_terms[lp] = abs(A.weight[lp]) * cost
            cell_weights[j] += s * A.weight[lp]
            if size == 1:
                exact += atom_terms[lp]
            else:
                over += atom_terms[lp]
        if size > 1:
            w = np.abs(A.weight[members])
            heaviest = int(np.argmax(w))
            for m, lp in enumerate(members):
                if m != heaviest:
                    extra_atoms.append(int(lp))
                    extra_weights.append(float(w[m]))
    weight_part = float(np.abs(cell_weights - As.weight).sum())
    return MeasureVoronoiDetails(
        loss=weight_part + exact + over, weight_part=weight_part, exact_part=float(exact),
        over_part=float(over), r=r, cells=cells, cell_weights=cell_weights,
        cell_exponents=exponents, atom_terms=atom_terms, atom_distances=atom_dist,
        gauges=gauges, extra_atoms=extra_atoms,
        extra_weights=np.array(extra_weights, dtype=np.float64),
    )


def measure_expert_errors(measure, true_measure, cells, X, *, expert, activation, weighting):
    """Per-true-expert errors at the measure level, shape ``(H*, N, K*)`` (NaN for a true
    expert whose atom was dropped)."""
    A, As = cells.atoms, cells.true_atoms

    def values(a):
        z = X @ a
        return phi(activation, z) if expert == "activated" else z

    out = np.full(true_measure.a.shape[:3], np.nan)
    for j in range(len(As)):
        members = cells.members[j]
        if members:
            atoms = [(lp, int(cells.signs[lp])) for lp in members]
        elif len(A):  # empty cell: the fitted atom whose branch is nearest
            lp = int(np.argmin(cells.distances[:, j]))
            atoms = [(lp, int(cells.pair_signs[lp, j]))]
        else:
            atoms = []
        target = values(As.a[j])
        if not atoms:  # no fitted atom at all: compared with the zero function
            err = float(np.max(np.abs(target)))
        else:
            errs = np.array([np.max(np.abs(values(s * A.a[lp]) - target)) for lp, s in atoms])
            w = np.abs(A.weight[[lp for lp, _ in atoms]])
            if weighting == "heaviest" or len(atoms) == 1:
                err = float(errs[int(np.argmax(w))])
            elif weighting == "max":
                err = float(errs.max())
            else:
                w = w / w.sum() if w.sum() > 0 else np.full(len(w), 1.0 / len(w))
                err = float(w @ errs)
        for h, i, k in As.members[j]:
            out[h, i, k] = err
    return out
