"""Expert error (paper eq. (7)) and regression error (Proposition 1).

**Expert error.** Each true expert ``(h, i, k)`` is matched to fitted experts through the
Voronoi cells and the gauge-aware token permutations of :func:`hmoe_estim.voronoi_loss`
(``L_2`` exponents): fitted channel ``(h', k') ∈ V[h, k]`` with permutation ``π`` contributes
the expert ``(h', π(i), k')``. Its error is ``sup_x |expert_hat(x) − expert*(x)|`` over the
reference sample, with the expert ``a·x`` (``"linear"``) or ``φ(a·x)`` (``"activated"``).

Cells with several fitted channels (docs: Theory to code, "Expert error and regression error"):
an atom whose weight tends to 0
carries no information about its expert, so the default ``weighting="heaviest"`` scores a cell
by its heaviest atom (largest ``omega``; the dominant atom of an over-specified fit);
``"weighted"`` takes the ``|omega|``-weighted mean of the atoms' errors (the Voronoi loss's
weighting, normalised by the cell weight) and ``"max"`` the unweighted worst atom.

Empty cells (a true channel no fitted branch is closest to, e.g. when ``K < K*``) are matched
to the fitted channel whose branch is nearest to theirs, so the error stays finite and large
when a true expert is missed.

For G1 and G2 with an odd activation (tanh) the sign flip ``(ω, a) -> (−ω, −a)`` is quotiented
as in :func:`hmoe_estim.voronoi_loss`: a fitted channel held as the signed atom ``(−ω, −a)``
contributes the expert of ``−a``.
"""

import numpy as np

from .._validation import check_activation, check_gate, check_token_matching
from ..model import regression_function
from ._atoms import check_level, measure_expert_errors
from ._branches import (
    DEFAULT_N_REF,
    check_measure_pair,
    match_tokens,
    phi,
    reference_sample,
    resolve_expert,
    token_cost_tables,
)
from ._voronoi import _voronoi_details, voronoi_cells

__all__ = ["expert_error", "regression_error", "channel_expert_errors", "WEIGHTINGS"]

#: Treatments of cells holding several fitted channels.
WEIGHTINGS = ("heaviest", "weighted", "max")


def _atom_errors(X, a_hat, a_true, reading, activation):
    """``max_x |e(â_i, x) − e(a*_i, x)|`` for each token ``i``; ``a_hat``, ``a_true`` (N, D)."""
    if reading == "linear":
        diff = X @ (a_hat - a_true).T
    else:
        diff = phi(activation, X @ a_hat.T) - phi(activation, X @ a_true.T)
    return np.abs(diff).max(axis=0)


def channel_expert_errors(measure, true_measure, details, X, *, expert, activation, weighting,
                          token_matching="auto"):
    """Per-true-expert errors at the channel level, shape ``(H*, N, K*)``, from the
    :class:`~hmoe_estim.metrics.VoronoiDetails` of the ``L_2`` loss (``r=None``) on the
    validated reference sample ``X`` (shared with the Voronoi loss of the same fit)."""
    cells = details.cells
    Hs, N, Ks, _ = true_measure.shape
    M_true = true_measure.normalized().M
    errors = np.empty((Hs, N, Ks))
    for h in range(Hs):
        for k in range(Ks):
            members = cells.members[h][k]
            a_true = true_measure.a[h, :, k]
            if members:
                atoms = [(m, details.token_permutations[m], cells.signs[m]) for m in members]
            else:
                dist = cells.distances[:, :, h, k]
                hp, kp = np.unravel_index(np.argmin(dist), dist.shape)
                sign = cells.pair_signs[hp, kp, h, k]
                cost_M, cost_a = token_cost_tables(
                    measure.M[hp], sign * measure.a[hp, :, kp], M_true[h], a_true, 1
                )
                perm, _ = match_tokens(cost_M, cost_a, method=token_matching)
                atoms = [((int(hp), int(kp)), perm, sign)]
            errs = np.array(
                [
                    _atom_errors(X, sign * measure.a[hp, perm, kp], a_true, expert, activation)
                    for (hp, kp), perm, sign in atoms
                ]
            )  # (n_atoms, N)
            w = np.array([abs(measure.omega[m]) for m, _, _ in atoms])
            if weighting == "heaviest" or len(atoms) == 1:
                errors[h, :, k] = errs[int(np.argmax(w))]
            elif weighting == "max":
                errors[h, :, k] = errs.max(axis=0)
            else:
                aw = np.abs(w)
                aw = aw / aw.sum() if aw.sum() > 0 else np.full(len(aw), 1.0 / len(aw))
                errors[h, :, k] = aw @ errs
    return errors


def expert_error(
    measure,
    true_measure,
    *,
    gate="none",
    activation="sigmoid",
    X_ref=None,
    per_expert=False,
    weighting="heaviest",
    expert="auto",
    n_ref=DEFAULT_N_REF,
    random_state=0,
    token_matching="auto",
    sign_symmetry="auto",
    level="channel",
):
    """Worst (or per-expert) sup-norm error of the experts, paper eq. (7).

    For each true expert ``(h, i, k)`` and each fitted channel ``(h', k')`` in its Voronoi cell
    ``V[h, k]`` with token permutation ``π`` (from :func:`hmoe_estim.voronoi_loss` with
    ``r=None``), the atom error is ``max_{x ∈ X_ref} |ê(x) − e*(x)|`` with
    ``ê = expert(a[h', π(i), k'])`` and ``e* = expert(a*[h, i, k])``. The atoms of a cell are
    combined according to ``weighting``; an empty cell uses the fitted channel whose branch
    function is nearest to the true branch (matched with exponent 1).

    Parameters
    ----------
    measure : MixingMeasure
        Fitted ``G``, shape ``(H, N, K, D)``.
    true_measure : MixingMeasure
        True ``G*``, shape ``(H*, N, K*, D)``.
    gate : {"none", "value", "sdpa", "output"}, default="none"
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
    X_ref : array-like of shape (n_ref, D), optional
        Reference sample for the cells and the sup norm. Default: ``n_ref`` points uniform on
        ``[-1, 1]^D`` (seeded by ``random_state``).
    per_expert : bool, default=False
        Return the array of per-true-expert errors instead of the worst one.
    weighting : {"heaviest", "weighted", "max"}, default="heaviest"
        Treatment of cells holding several fitted channels: error of the heaviest atom
        (largest ``omega``, ties to the first), the ``|omega|``-weighted mean of the atoms'
        errors, or the unweighted maximum over the atoms (the worst case, which stays large
        when a near-zero-weight extra atom wanders).
    expert : {"auto", "linear", "activated"}, default="auto"
        Function whose error is measured: ``"auto"`` is the function the token gate mixes —
        ``a·x`` for ``"none"``, ``"sdpa"``, ``"output"``; ``φ(a·x)`` for ``"value"``.
        The cells always use the ``"auto"`` reading.
    n_ref : int, default=4096
    random_state : int, default=0
    token_matching : {"auto", "enumerate", "hungarian"}, default="auto"
        See :func:`hmoe_estim.voronoi_loss`.
    sign_symmetry : {"auto", True, False}, default="auto"
        Quotient the channel sign flip (see :func:`hmoe_estim.voronoi_cells`): an atom held
        with sign ``s`` is compared through its expert ``s a``.
    level : {"channel", "measure"}, default="channel"
        ``"channel"``: the cells and token permutations of the channel-level Voronoi loss
        (above). ``"measure"``: the cells of the measure-level loss
        (:func:`hmoe_estim.voronoi_loss` with ``level="measure"``): each true atom
        ``(M*[h,i], a*[h,i,k])`` (merged with coinciding ones) is compared with the fitted
        atoms of its cell, combined by ``weighting``; an empty cell uses the fitted atom whose
        branch is nearest. ``gate="value"`` (G2) only. A true expert whose atom is dropped
        (null or zero weight) gets ``NaN`` in the per-expert array and is left out of the
        maximum.

    Returns
    -------
    float or ndarray of shape (H*, N, K*)
        ``max`` over true experts, or the per-expert errors ``err[h, i, k]``.

    Raises
    ------
    ValueError
        Measures with different ``D`` or ``N``, bad ``X_ref``, unknown gate, activation,
        expert reading, weighting or level; ``level="measure"`` for a gate other than
        ``"value"`` (with the reason).

    Examples
    --------
    >>> import numpy as np
    >>> from hmoe_estim import MixingMeasure
    >>> from hmoe_estim.metrics import expert_error
    >>> M = np.zeros((1, 2, 2, 2)); M[0, 0] = np.eye(2)
    >>> G = MixingMeasure([[1.0]], M, np.arange(4.0).reshape(1, 2, 1, 2))
    >>> G_hat = MixingMeasure([[1.0]], M, G.a + 0.1)
    >>> round(expert_error(G_hat, G), 2)  # sup over [-1, 1]^2 of |0.1 x_1 + 0.1 x_2|
    0.2
    """
    check_gate(gate)
    check_activation(activation)
    if weighting not in WEIGHTINGS:
        raise ValueError(
            f"Unknown weighting {weighting!r}. Use 'heaviest' (the cell's heaviest atom), "
            "'weighted' (omega-weighted mean over the cell) or 'max' (unweighted worst atom)."
        )
    check_token_matching(token_matching)
    check_level(level, gate)
    reading = resolve_expert(gate, expert)
    check_measure_pair(measure, true_measure, same_tokens=True)
    X = reference_sample(measure.n_features, X_ref, n_ref=n_ref, random_state=random_state)
    if level == "measure":
        cells = voronoi_cells(measure, true_measure, gate=gate, activation=activation, X_ref=X,
                              sign_symmetry=sign_symmetry, level="measure")
        errors = measure_expert_errors(measure, true_measure, cells, X, expert=reading,
                                       activation=activation, weighting=weighting)
        return errors if per_expert else float(np.nanmax(errors))
    cells = voronoi_cells(measure, true_measure, gate=gate, activation=activation, X_ref=X,
                          sign_symmetry=sign_symmetry)
    details = _voronoi_details(measure, true_measure, cells, None, token_matching)
    errors = channel_expert_errors(measure, true_measure, details, X, expert=reading,
                                   activation=activation, weighting=weighting,
                                   token_matching=token_matching)
    return errors if per_expert else float(errors.max())


def regression_error(
    measure,
    true_measure,
    *,
    gate="none",
    activation="sigmoid",
    X_ref=None,
    n_ref=DEFAULT_N_REF,
    random_state=0,
):
    """``‖f_Ĝ − f_{G*}‖_{L2(μ)}`` estimated on a reference sample (paper, Proposition 1).

    ``sqrt(mean_{x ∈ X_ref} (f_Ĝ(x) − f_{G*}(x))²)`` with both functions evaluated by
    :func:`hmoe_estim.regression_function` under the same gate and activation.

    Parameters
    ----------
    measure, true_measure : MixingMeasure
        Same input dimension ``D``; ``H``, ``N`` and ``K`` may differ.
    gate : {"none", "value", "sdpa", "output"}, default="none"
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
    X_ref : array-like of shape (n_ref, D), optional
        Sample of ``μ``. Default: ``n_ref`` points uniform on ``[-1, 1]^D``.
    n_ref : int, default=4096
    random_state : int, default=0

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Measures with different ``D``, bad ``X_ref``, unknown gate or activation.

    Examples
    --------
    >>> import numpy as np
    >>> from hmoe_estim import MixingMeasure
    >>> from hmoe_estim.metrics import regression_error
    >>> G = MixingMeasure([[1.0]], np.zeros((1, 2, 2, 2)), np.ones((1, 2, 1, 2)))
    >>> G_hat = MixingMeasure([[1.1]], G.M, G.a)
    >>> round(regression_error(G_hat, G, X_ref=[[1.0, 1.0]]), 6)
    0.2
    """
    check_gate(gate)
    check_activation(activation)
    check_measure_pair(measure, true_measure, same_tokens=False)
    X = reference_sample(measure.n_features, X_ref, n_ref=n_ref, random_state=random_state)
    diff = regression_function(measure, X, gate=gate, activation=activation) - regression_function(
        true_measure, X, gate=gate, activation=activation
    )
    return float(np.sqrt(np.mean(diff * diff)))
